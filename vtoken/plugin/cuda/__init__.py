"""The CUDA pieces of the plugin (vLLM 0.32 on CUDA, MRV1, synchronous scheduling, eager mode):
the worker and model runner (:mod:`.worker`, :mod:`.model_runner`), the attention backend over
vLLM's own Triton kernels with a page-size-1 view of the pool (:mod:`.backend`,
:mod:`.triton_ops`), and the side-stream relocator (:mod:`.relocation`). Everything else in
:mod:`vtoken.plugin` is device-independent and shared with the CPU path.

What has run where (docs/cuda.md): the Triton kernels these classes call have run
on the CPU under Triton's interpreter in the test suite (``tests/plugin/test_cuda_path.py``);
the classes themselves, the relocator's stream ordering and a CUDA vLLM engine have **not run
on a GPU**.
"""
