"""Shared data of the SQL tests: small tables with nulls and unicode, and queries run both
through DuckDB directly and through the compiled plan."""

from __future__ import annotations

import pyarrow as pa

REVIEWS = pa.table(
    {
        "id": pa.array([1, 2, 3, 4, 5, 6, 7, 8], pa.int64()),
        "product_id": pa.array([10, 10, 20, 30, None, 20, 10, 40], pa.int64()),
        "review": pa.array(["great", "bad", "ok ünïcödé", None, "great", "terrible 🙁", "fine", "great"], pa.string()),
        "rating": pa.array([5, 1, 3, None, 5, 1, 4, 5], pa.int64()),
        "weight": pa.array([0.5, 1.5, None, 2.0, 2.5, -1.0, 0.0, 3.5], pa.float64()),
    }
)

PRODUCTS = pa.table(
    {
        "id": pa.array([10, 20, 30, 50, None], pa.int64()),
        "name": pa.array(["lamp", "désk", "chair", "sofa", "ghost"], pa.string()),
        "price": pa.array([9.5, 120.0, 45.25, None, 1.0], pa.float64()),
    }
)

EMPTY = pa.table({"id": pa.array([], pa.int64()), "name": pa.array([], pa.string())})

TABLES = {"reviews": REVIEWS, "products": PRODUCTS, "empty": EMPTY}

# (query, ordered): ordered queries have an ORDER BY that fixes the order of distinct rows.
QUERIES: list[tuple[str, bool]] = [
    ("SELECT * FROM reviews", False),
    ("SELECT id, rating FROM reviews WHERE rating >= 4", False),
    ("SELECT id, rating * 2 + 1 AS r, upper(review) FROM reviews WHERE review IS NOT NULL AND rating > 1", False),
    ("SELECT id FROM reviews WHERE rating > 3 OR review LIKE 'ok%'", False),
    (
        "SELECT id, CASE WHEN rating >= 4 THEN 'good' WHEN rating IS NULL THEN 'none' ELSE 'bad' END AS v FROM reviews",
        False,
    ),
    ("SELECT id, coalesce(rating, -1) AS r, length(review) AS n FROM reviews", False),
    ("SELECT r.id, p.name FROM reviews r JOIN products p ON r.product_id = p.id", False),
    ("SELECT r.id, p.id, p.name FROM reviews AS r JOIN products AS p ON r.product_id = p.id", False),
    ("SELECT * FROM reviews r JOIN products p ON r.product_id = p.id", False),
    ("SELECT * FROM reviews r LEFT JOIN products p ON r.product_id = p.id", False),
    ("SELECT r.id, p.name FROM reviews r LEFT JOIN products p ON r.product_id = p.id AND p.price > 10", False),
    ("SELECT r.id, p.name FROM reviews r RIGHT JOIN products p ON r.product_id = p.id", False),
    ("SELECT * FROM reviews r RIGHT JOIN products p ON r.product_id = p.id", False),
    ("SELECT r.id, p.name FROM reviews r JOIN products p ON r.product_id = p.id AND r.rating > p.price / 100", False),
    ("SELECT * FROM products JOIN reviews USING (id)", False),
    ("SELECT p.name FROM products p SEMI JOIN reviews r ON p.id = r.product_id", False),
    ("SELECT p.name FROM products p ANTI JOIN reviews r ON p.id = r.product_id", False),
    ("SELECT name FROM products WHERE id IN (SELECT product_id FROM reviews WHERE rating = 5)", False),
    (
        "SELECT product_id, count(*) AS n, sum(rating), avg(weight), min(review), max(review)"
        " FROM reviews GROUP BY product_id",
        False,
    ),
    ("SELECT count(*), count(rating), sum(weight) FROM reviews", False),
    ("SELECT count(*) AS n, max(id) FROM empty", False),
    ("SELECT name, count(*) FROM empty GROUP BY name", False),
    ("SELECT rating % 2 AS parity, count(*) FROM reviews GROUP BY rating % 2", False),
    ("SELECT rating % 2 AS parity, count(*) FROM reviews GROUP BY parity", False),
    ("SELECT rating % 2, count(*) FROM reviews GROUP BY 1", False),
    ("SELECT product_id, count(*) AS n FROM reviews GROUP BY product_id HAVING count(*) > 1", False),
    ("SELECT product_id, count(DISTINCT review) AS n FROM reviews GROUP BY product_id HAVING max(rating) >= 4", False),
    ("SELECT product_id + 1 AS k, sum(rating) * 2 AS s FROM reviews GROUP BY product_id + 1", False),
    ("SELECT p.name, count(*) AS n FROM reviews r JOIN products p ON r.product_id = p.id GROUP BY p.name", False),
    ("SELECT DISTINCT review FROM reviews", False),
    ("SELECT DISTINCT product_id, rating > 3 AS good FROM reviews", False),
    ("SELECT id, review FROM reviews ORDER BY id DESC", True),
    ("SELECT id, rating FROM reviews ORDER BY rating, id", True),
    ("SELECT id, rating FROM reviews ORDER BY rating DESC NULLS FIRST, id", True),
    ("SELECT id FROM reviews ORDER BY weight, id", True),
    ("SELECT id, rating FROM reviews ORDER BY 2 DESC, 1 LIMIT 3", True),
    ("SELECT id FROM reviews ORDER BY id LIMIT 3 OFFSET 2", True),
    ("SELECT id FROM reviews ORDER BY id OFFSET 5", True),
    ("SELECT product_id, count(*) AS n FROM reviews GROUP BY product_id ORDER BY n DESC, product_id", True),
    ("SELECT product_id FROM reviews GROUP BY product_id ORDER BY count(*) DESC, product_id NULLS FIRST", True),
    ("SELECT id FROM reviews UNION ALL SELECT id FROM products", False),
    ("SELECT id FROM reviews UNION SELECT id FROM products", False),
    (
        "SELECT id, review FROM reviews UNION ALL SELECT id, name FROM products UNION ALL SELECT id, name FROM empty",
        False,
    ),
    ("SELECT rating FROM reviews UNION SELECT price FROM products ORDER BY 1 LIMIT 4", True),
    ("SELECT s.id FROM (SELECT id, rating FROM reviews WHERE rating > 2) AS s WHERE s.rating < 5", False),
    (
        "WITH good AS (SELECT * FROM reviews WHERE rating >= 4)"
        " SELECT g.id, p.name FROM good g JOIN products p ON g.product_id = p.id",
        False,
    ),
    ("WITH a(x) AS (SELECT id FROM reviews), b AS (SELECT x * 10 AS y FROM a) SELECT y FROM b WHERE y > 20", False),
    ("SELECT * FROM (SELECT product_id, count(*) AS n FROM reviews GROUP BY product_id) t WHERE n > 1", False),
    ("SELECT id, review FROM reviews WHERE review IN ('great', 'fine') AND NOT (rating < 5)", False),
    ("SELECT id FROM reviews WHERE weight BETWEEN 0 AND 2.5", False),
    ('SELECT "id", "Rating" FROM reviews', False),
    ("SELECT id FROM empty WHERE name = 'x'", False),
    ("SELECT e.id, r.review FROM empty e LEFT JOIN reviews r ON e.id = r.id", False),
    ("SELECT * EXCLUDE (review, weight) FROM reviews", False),
    ("SELECT r.* FROM reviews r JOIN products p ON r.product_id = p.id WHERE p.price < 100", False),
    ("SELECT a.id, b.id FROM reviews a JOIN reviews b ON a.product_id = b.product_id AND a.id < b.id", False),
    ("SELECT id, id FROM reviews", False),
    ("SELECT review, string_agg(CAST(id AS VARCHAR), ',' ORDER BY id) AS ids FROM reviews GROUP BY review", False),
    ("SELECT id FROM reviews WHERE rating = (1 + 4)", False),
    ("SELECT product_id, any_value(product_id) FROM reviews GROUP BY product_id", False),
    ("SELECT product_id, count(*) FILTER (WHERE rating > 2) AS n FROM reviews GROUP BY product_id", False),
    ("SELECT product_id, string_agg(review, '|') FILTER (WHERE review IS NOT NULL) FROM reviews GROUP BY 1", False),
    ("SELECT a.id FROM reviews a JOIN products p ON a.product_id = p.id JOIN reviews b ON p.id = b.product_id", False),
    ("SELECT product_id, rating FROM reviews GROUP BY ALL", False),
    ("SELECT list(id ORDER BY id) AS ids FROM reviews", False),
    ("SELECT max(rating) FROM reviews HAVING max(rating) > 0", False),
    ("SELECT x.id FROM (SELECT * FROM reviews ORDER BY id LIMIT 3) x", False),
    ("SELECT * FROM (SELECT id FROM reviews UNION ALL SELECT id FROM products) u WHERE id > 5", False),
    (
        "SELECT CASE WHEN count(*) > 1 THEN 'many' ELSE 'one' END AS c, product_id FROM reviews GROUP BY product_id",
        False,
    ),
    ("SELECT id FROM reviews ORDER BY abs(weight) DESC NULLS LAST, id LIMIT 4", True),
    ("SELECT product_id FROM reviews GROUP BY product_id HAVING product_id > 10", False),
    ("SELECT CAST('2024-01-01' AS DATE) + INTERVAL 1 DAY AS d, id FROM reviews", False),
    ("SELECT product_id, count(*) AS n FROM reviews GROUP BY product_id HAVING n > 1", False),
    ("SELECT rating * 2 AS r FROM reviews WHERE r > 4", False),
    ("SELECT id AS rating FROM reviews WHERE rating > 3", False),
    ("SELECT product_id AS p, sum(rating) AS s FROM reviews GROUP BY p HAVING s > 3 AND p > 10", False),
    (
        "SELECT name FROM products p"
        " WHERE EXISTS (SELECT 1 FROM reviews r WHERE r.product_id = p.id AND r.rating >= 4)",
        False,
    ),
    ("SELECT name FROM products p WHERE NOT EXISTS (SELECT * FROM reviews r WHERE p.id = r.product_id)", False),
    (
        "SELECT id FROM reviews WHERE rating > 1"
        " AND NOT EXISTS (SELECT 1 FROM products WHERE products.id = reviews.product_id AND price > 10)",
        False,
    ),
]
