"""Run a vToken ``full`` engine with vLLM's default multiprocessing; print greedy ids as JSON.

Used by ``test_multiprocess.py`` in a subprocess (multiprocess engines need the
``__main__`` guard and a process whose vLLM environment cache is still fresh).
Usage: ``python mp_generate.py MODEL_DIR PROMPTS_JSON MAX_TOKENS [VTOKEN_JSON [ENGINE_ARGS_JSON]]``
(default ``{"arm": "full"}`` in float16).
"""

import json
import sys

if __name__ == "__main__":
    import os

    # The probe below sends a function to the worker; vLLM's msgpack RPC refuses
    # functions unless pickle fallback is allowed (fine for a local test).
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    from vllm import LLM, SamplingParams

    from vtoken.engine_args import engine_args

    model_dir, prompts, max_tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    vtoken = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {"arm": "full"}
    overrides = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {"dtype": "float16"}
    llm = LLM(**engine_args(model_dir, vtoken=vtoken, **overrides))
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    tokens = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]

    def probe(worker):
        import os

        model = worker.model_runner.model
        impls = sorted({type(m.impl).__name__ for m in model.modules() if hasattr(m, "impl")})
        return {"pid": os.getpid(), "impls": impls, "layout": worker.vllm_config.cache_config.kv_cache_layout}

    print("VTOKEN_RESULT " + json.dumps({"tokens": tokens, "workers": llm.collective_rpc(probe), "pid": os.getpid()}))
