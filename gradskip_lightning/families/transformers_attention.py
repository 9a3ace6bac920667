"""What the HF ``transformers`` families (ViTs, SegFormer) share: one attention implementation for a call.

``transformers`` dispatches each attention module through ``ALL_ATTENTION_FUNCTIONS`` by
``config._attn_implementation``; ``"eager"`` returns the post-softmax probabilities, ``"sdpa"`` none
(../shared/docs/facts.md). The switch is set on the network's config for the call and restored.

Private API, kept on purpose: ``config._attn_implementation`` is the attribute transformers itself
reads to dispatch and the only way to read the current choice back (the public
``PreTrainedModel.set_attn_implementation`` only sets, re-validating kernels on every call);
``tests/families/test_transformers_attention.py`` fails if it stops steering the dispatch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["attention_implementation"]


@contextmanager
def attention_implementation(config: Any, implementation: str) -> Iterator[None]:
    """``config``'s attention dispatched to ``implementation`` (a name registered in transformers'
    ``AttentionInterface``: ``"eager"``, or one of ours) inside the block; the previous one restored."""
    previous = config._attn_implementation
    try:
        config._attn_implementation = implementation
        yield
    finally:
        config._attn_implementation = previous
