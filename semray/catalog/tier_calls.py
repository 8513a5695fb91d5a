"""One batch of requests to a configured LLM tier, from the driver, outside any query run.

The catalog asks a model for dataset summaries (``summaries.py``), topic hierarchies and labels
(``organize.py``) and the sections of documents without headings (``section_writer.py``): each builds
the tier from the profile's config, sends its requests and closes it. No Serve deployment is started
for that: an ingest is not a query run.

>>> asyncio.run(generate_with_tier(serving, "small", [ModelRequest(prompt="hi")]))[0].text  # doctest: +SKIP
'Hello.'
"""

from __future__ import annotations

from semray.serving.config import ServingConfig
from semray.serving.contract import ModelRequest, ModelResponse


async def generate_with_tier(
    config: ServingConfig, tier_name: str, requests: list[ModelRequest]
) -> list[ModelResponse]:
    """The responses of ``config``'s tier ``tier_name`` to ``requests``, in order."""
    from semray.serving.backends import build_backend
    from semray.serving.tier import ModelTier

    tier_config = config.tier(tier_name)
    tier = ModelTier(tier_name, tier_config, build_backend(tier_config, config))
    try:
        return await tier.generate(requests)
    finally:
        await tier.aclose()
