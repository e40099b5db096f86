"""CPU-only pieces of the plugin: the compiled extension (:mod:`vtoken.plugin.cpu.extension`)
and its C++ source (``csrc/token_attention.cpp``: token-view attention and relocation)."""
