"""The CPU-only pieces of the plugin: the C++ extension build (:mod:`.extension`), the
attention backend class vLLM's CPU slot resolves to (:mod:`.backend`, chosen per engine by
:mod:`.backend_switch`), and the CPU worker and model runner (:mod:`.worker`,
:mod:`.model_runner`). Everything else in :mod:`vtoken.plugin` is device-independent."""
