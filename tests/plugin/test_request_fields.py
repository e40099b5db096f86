"""The plugin's request fields (``extra_args``) checked at admission: a bad one is refused by
``LLM.generate`` naming the field and value before the engine sees it, and what only the worker
can check (a forced id against the vocabulary) fails that request alone while the others run on."""

from __future__ import annotations

import pytest

from tests.plugin.conftest import in_child, in_process_llm, release
from vtoken.plugin.forcing import FORCING_KEY
from vtoken.plugin.request_fields import CONTEXT_KEY, PROCESSOR, check

PROMPT = "<|im_start|>user\nName three colours of the rainbow.<|im_end|>\n<|im_start|>assistant\n"


class P:
    def __init__(self, extra, max_tokens=4):
        self.extra_args, self.max_tokens = extra, max_tokens


@pytest.mark.parametrize(("extra", "message"), [
    ({CONTEXT_KEY: 0}, r"extra_args\['vtoken_context_tokens'\]=0: must be an integer >= 1"),
    ({CONTEXT_KEY: "12"}, r"extra_args\['vtoken_context_tokens'\]='12'"),
    ({CONTEXT_KEY: True}, r"extra_args\['vtoken_context_tokens'\]=True"),
    ({"vtoken_contxt_tokens": 4}, r"extra_args\['vtoken_contxt_tokens'\]: not a field of the vToken plugin"),
    ({FORCING_KEY: {"ids": []}}, r"the forced continuation is empty"),
    ({FORCING_KEY: {"ids": [1, 2, 3]}}, r"3 forced tokens, but max_tokens=4"),
])
def test_check_names_the_field_and_value(extra, message):
    with pytest.raises(ValueError, match=message):
        check(P(extra))


def test_check_passes_good_fields_and_foreign_keys():
    check(P({CONTEXT_KEY: 12, FORCING_KEY: {"ids": [1, 2, 3, 4]}, "someone_else": object()}))
    check(P(None))
    with pytest.raises(ValueError, match="token id 70000 outside the vocabulary"):
        check(P({FORCING_KEY: {"ids": [1, 2, 3, 70000]}}), vocab_size=49152)


def test_every_vtoken_engine_installs_the_check(model_dir):
    from vtoken.engine_args import engine_args, serve_command

    args = engine_args(model_dir, vtoken={"arm": "naive", "policy": "h2o", "budget": 64}, dtype="float32",
                       logits_processors=["a.b:C"])
    assert args["logits_processors"] == ["a.b:C", PROCESSOR]
    assert engine_args(model_dir, vtoken={"arm": "full"}, dtype="float32")["logits_processors"] == [PROCESSOR]
    cmd = serve_command(model_dir, vtoken={"arm": "full"}, dtype="float32")
    assert cmd[cmd.index("--logits-processors") + 1] == PROCESSOR


def _admission_run(model_dir) -> dict:
    from transformers import AutoTokenizer
    from vllm import SamplingParams

    from vtoken.engine_args import engine_args

    tok = AutoTokenizer.from_pretrained(model_dir)
    prompt = {"prompt_token_ids": tok.encode(PROMPT, add_special_tokens=False)}
    llm = in_process_llm(**engine_args(model_dir, vtoken={"arm": "naive", "policy": "h2o", "budget": 64},
                                       dtype="float32", max_model_len=256))
    out = {}
    try:
        good = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
        out["alone"] = list(llm.generate([prompt], good, use_tqdm=False)[0].outputs[0].token_ids)
        try:
            llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=6, extra_args={CONTEXT_KEY: -3}),
                         use_tqdm=False)
            out["refused"] = None
        except Exception as exc:  # noqa: BLE001 -- the type is what the test reads
            out["refused"] = (type(exc).__name__, str(exc))
        # A forced id outside the vocabulary passes admission (the hook does not know the model) and
        # fails in the worker at the request's start: that request alone.
        bad = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True,
                             extra_args={FORCING_KEY: {"ids": [1, 2, 3, 4, 5, 10**6]}})
        res = llm.generate([prompt, prompt, prompt], [good, bad, good], use_tqdm=False)
        out["batch"] = [(r.outputs[0].finish_reason, list(r.outputs[0].token_ids), r.outputs[0].stop_reason)
                        for r in res]
        out["after"] = list(llm.generate([prompt], good, use_tqdm=False)[0].outputs[0].token_ids)
    finally:
        release(llm)
    return out


@pytest.mark.engine
def test_a_bad_field_is_refused_at_admission_and_a_worker_side_failure_fails_one_request(model_dir):
    got = in_child(_admission_run, model_dir)
    assert got["refused"] is not None, "a bad vtoken_context_tokens was accepted"
    kind, message = got["refused"]
    assert kind == "VLLMValidationError", got["refused"]
    assert "extra_args['vtoken_context_tokens']=-3: must be an integer >= 1" in message
    (r0, r1, r2) = got["batch"]
    assert r1[0] == "error" and "token id 1000000 outside the vocabulary" in str(r1[2]), r1
    assert r0 == r2 and r0[0] == "length" and r0[1] == got["alone"], got["batch"]  # the others run on, unchanged
    assert got["after"] == got["alone"]  # and the engine serves the next call
