"""Lowering: logical operators -> physical stages (``pipeline/stages``), one small function per
operator in a dispatch table (``driver.LOWERINGS``); no Ray here."""
