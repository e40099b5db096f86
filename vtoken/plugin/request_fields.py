"""The per-request fields the plugin reads (``SamplingParams.extra_args``), checked when a request
arrives, before any engine step.

A vToken engine reads two fields of a request's ``extra_args``: ``vtoken_context_tokens`` (the
prompt's context, for a prefill-once press: :func:`vtoken.plugin.model_runner.context_tokens`) and
``vtoken_forcing`` (a forced continuation: :func:`vtoken.plugin.forcing.forcing_of`). Any other key
that starts with ``vtoken_`` is a typo and is refused. :class:`RequestFieldsCheck` is a no-op vLLM
logits processor whose ``validate_params`` hook runs :func:`check` in vLLM's input processor for
every request (``vllm/v1/engine/input_processor.py``, ``_validate_params``): a bad field raises
there, so ``LLM.generate`` raises vLLM's ``VLLMValidationError`` (its client error) with the
message naming the field, the value and what is allowed, and the OpenAI server answers 400; the
engine never sees the request. :func:`vtoken.engine_args.engine_args` installs the processor on
every vToken engine. What admission cannot check (a forced id against the model's vocabulary,
which the hook does not know) is checked again when the request starts in the worker, and a failure
there fails that request alone (``Control.failed``, :mod:`vtoken.plugin.scheduler`).

The processor changes no logits: ``apply`` returns them as they are and it declares itself
argmax-invariant, so vLLM applies it on random-sampling steps only, as an identity.
"""

from __future__ import annotations

from vllm.v1.sample.logits_processor import LogitsProcessor

from vtoken.plugin.forcing import FORCING_KEY, forcing_of

# A request names its context (the prompt's first tokens; the rest is its question) in its sampling
# parameters' ``extra_args``: what a prefill-once kvpress press compresses (docs/kvpress.md).
CONTEXT_KEY = "vtoken_context_tokens"


def context_tokens(sampling_params) -> int | None:
    """The context a request names (``SamplingParams(extra_args={CONTEXT_KEY: n})``), or None.

    Raises:
        ValueError: the value is not an integer >= 1.
    """
    extra = getattr(sampling_params, "extra_args", None) or {}
    n = extra.get(CONTEXT_KEY)
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"extra_args[{CONTEXT_KEY!r}]={n!r}: must be an integer >= 1 (the prompt's context tokens)")
    return n


PREFIX = "vtoken_"
KEYS = (CONTEXT_KEY, FORCING_KEY)
PROCESSOR = "vtoken.plugin.request_fields:RequestFieldsCheck"  # vLLM's FQCN form (module:class)


def check(sampling_params, vocab_size: int | None = None) -> None:
    """Raise ``ValueError`` naming the field, its value and what is allowed, for a bad field of
    ``sampling_params.extra_args`` (module docstring); ``vocab_size`` None: ids not checked against it."""
    extra = getattr(sampling_params, "extra_args", None) or {}
    unknown = sorted(k for k in extra if isinstance(k, str) and k.startswith(PREFIX) and k not in KEYS)
    if unknown:
        raise ValueError(f"extra_args[{unknown[0]!r}]: not a field of the vToken plugin; its fields are {list(KEYS)}")
    context_tokens(sampling_params)
    forcing_of(sampling_params, vocab_size, getattr(sampling_params, "max_tokens", None))


class RequestFieldsCheck(LogitsProcessor):
    """vLLM's per-request validation hook for the plugin's fields; an identity on the logits."""

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        check(sampling_params)

    def __init__(self, vllm_config, device, is_pin_memory) -> None:
        pass

    def apply(self, logits):
        return logits

    def is_argmax_invariant(self) -> bool:
        return True

    def update_state(self, batch_update) -> None:
        pass
