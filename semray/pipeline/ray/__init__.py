"""Physical stages -> Ray Data pipelines: the only modules of the pipeline that import ``ray.data``."""
