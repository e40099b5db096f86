"""kvpress's own pipeline as the reference for its presses in the engine.

The same RULER documents (context and question split as kvpress's RULER data set splits them,
:mod:`.documents`) go through

- kvpress's ``kv-press-text-generation`` pipeline on the HF copy of the embedded model, in the
  transformers kvpress 0.5.5 declares (< 5.3; a side environment ``make venv`` installs,
  ``.venv/kvpress-reference``), with each press at each ratio: kvpress's own answer, its
  per-head kept sets replayed by hand (which must give the pipeline's answer: a check of the
  replay), and the adapter's per-token consensus (vtoken/policies/kvpress.py, mode
  ``prefill_once``) applied to the same cache (:mod:`.hf`);
- the vLLM engine with the vToken arm and the same press in mode ``prefill_once``, the request
  naming its context (``extra_args["vtoken_context_tokens"]``), prompts given as the pipeline's
  own token ids (:mod:`.engine`).

Each side writes one JSON line per (document, press, ratio); the table
(``vtoken.bench.analysis.kvpress_reference``) sets them side by side and counts agreement.
"""
