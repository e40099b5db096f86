"""One arm behind vLLM's OpenAI-compatible server, on loopback, as a context manager.

The server is started with the documented command (:func:`vtoken.engine_args.serve_command`,
vLLM's ``vllm.entrypoints.openai.api_server`` module: ``vllm serve`` does not start on the
CPU wheel) in a process of its own, with ``VLLM_SERVER_DEV_MODE=1`` so that
``POST /collective_rpc`` reaches the worker (:meth:`Server.worker_tables`). It reads what a
long-running server must give back: the pool's use and the request queues from vLLM's
Prometheus ``/metrics`` (:meth:`Server.metrics`), and the worker's per-request records.

    with Server(model_dir, vtoken={"arm": "vtoken", "policy": "h2o", "budget": 32},
                log_path="server.log") as server:
        server.url  # http://127.0.0.1:<port>

Stopping sends SIGTERM (vLLM shuts the engine down and the scheduler closes the metrics
sink), then SIGKILL after ``stop_timeout`` seconds. On Linux the server also gets SIGTERM when
the process that started it dies (``PR_SET_PDEATHSIG``), so a killed benchmark leaves no
server behind.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vtoken.plugin.config import PluginConfig

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"
# Thread counts a parent may set (Snakemake sets them to a job's threads). vLLM's CPU worker
# binds its OpenMP threads to cores itself (VLLM_CPU_OMP_THREADS_BIND) and sizes torch's threads
# from that binding unless OMP_NUM_THREADS is set: inherited OMP_NUM_THREADS=2 on a worker bound
# to one core made a served SmolLM2 generate 3 tok/s instead of ~50 (spin-wait contention).
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "GOTO_NUM_THREADS")
SERVED_MODEL_NAME = "smollm2"
TABLE_SIZES_METHOD = "vtoken_table_sizes"  # the vToken workers' method (vtoken.plugin.cpu.worker)
_METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def server_env(env: dict[str, str] | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The server process's environment: ``base`` (default ``os.environ``) without inherited thread
    counts (``THREAD_VARS``), offline, with vLLM's CPU worker bound to every core of this process
    (``VLLM_CPU_OMP_THREADS_BIND``, :func:`vtoken.cpu_host.all_cores`; vLLM's ``auto`` leaves one
    of two cores to the front end: served TPOT p50 74.8 -> 54.1 ms here, docs/cpu-host.md);
    ``env`` last, so it overrides any of these. tcmalloc and Intel OpenMP are not preloaded:
    they did not change the decode step or the served TPOT here (docs/cpu-host.md)."""
    from vtoken.cpu_host import all_cores

    inherited = {k: v for k, v in (os.environ if base is None else base).items() if k not in THREAD_VARS}
    inherited.setdefault("VLLM_CPU_OMP_THREADS_BIND", all_cores())
    return {**inherited, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
            "VLLM_SERVER_DEV_MODE": "1", **(env or {})}


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent exits (Linux; elsewhere nothing)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition -> ``{name: value}``, summed over label sets (one engine)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        m = _METRIC_LINE.match(line.strip())
        if m and not line.startswith("#"):
            values[m.group(1)] = values.get(m.group(1), 0.0) + float(m.group(3))
    return values


class ServerError(RuntimeError):
    """The server process exited or did not become ready; the message ends with its log's tail."""


class Server:
    """A vLLM OpenAI-compatible server of one engine (stock or vToken), on ``127.0.0.1``.

    Args:
        model: local HF model folder.
        vtoken: vToken settings (a ``PluginConfig`` or its fields) or None for stock vLLM.
        log_path: file that receives the server's stdout and stderr.
        port: TCP port (default: a free one).
        served_model_name: the model name clients send.
        startup_timeout: seconds to wait for ``/v1/models`` to answer.
        stop_timeout: seconds between SIGTERM and SIGKILL.
        env: extra environment variables of the server process (:func:`server_env`: inherited
            thread counts are dropped, vLLM binds its threads to every core; a variable given
            here wins).
        **overrides: engine arguments (:func:`vtoken.engine_args.engine_args`).
    """

    def __init__(self, model: str | Path, vtoken: dict[str, Any] | PluginConfig | None = None, *, log_path: str | Path,
                 port: int | None = None, served_model_name: str = SERVED_MODEL_NAME,
                 startup_timeout: float = 300.0, stop_timeout: float = 60.0,
                 env: dict[str, str] | None = None, **overrides: Any) -> None:
        from vtoken.engine_args import serve_command

        self.port = port if port is not None else free_port()
        self.model_name = served_model_name
        self.log_path = Path(log_path)
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.command = serve_command(model, vtoken=vtoken, **overrides) + [
            "--host", HOST, "--port", str(self.port), "--served-model-name", served_model_name]
        self.env = server_env(env)
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (the OpenAI API is under ``/v1``)."""
        return f"http://{HOST}:{self.port}"

    # ------------------------------------------------------------ lifecycle
    def start(self) -> Server:
        """Start the process and wait until it serves ``/v1/models``.

        Raises:
            ServerError: the process exited, or ``startup_timeout`` passed.
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "w", encoding="utf-8") as log:
            self.process = subprocess.Popen(self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            preexec_fn=_die_with_parent)
        logger.info("server starting on %s (pid %d, log %s)", self.url, self.process.pid, self.log_path)
        start = time.monotonic()
        deadline = start + self.startup_timeout
        while True:
            self._check_alive()
            try:
                self.get("/v1/models", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise ServerError(f"server did not answer in startup_timeout={self.startup_timeout} s; "
                                      f"log {self.log_path}:\n{self.log_tail()}") from None
                time.sleep(1.0)
        logger.info("server ready on %s after %.0f s", self.url, time.monotonic() - start)
        return self

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after ``stop_timeout`` s; returns the exit code (None: never started)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                logger.warning("server pid %d ignored SIGTERM for %.0f s: killing it", self.process.pid,
                               self.stop_timeout)
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _check_alive(self) -> None:
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            raise ServerError(f"server process exited (code {code}); log {self.log_path}:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        """The last ``chars`` characters of the server's log."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no log)"

    # ----------------------------------------------------------------- HTTP
    def get(self, path: str, timeout: float = 30.0) -> str:
        """``GET path``; the body as text (raises ``urllib.error.HTTPError`` on 4xx/5xx)."""
        with urllib.request.urlopen(self.url + path, timeout=timeout) as reply:
            return reply.read().decode()

    def post(self, path: str, body: bytes | dict, timeout: float = 120.0) -> tuple[int, dict]:
        """``POST path`` with a JSON body (a dict, or raw bytes sent as they are); returns the
        status and the decoded JSON reply, for errors too."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                return reply.status, json.loads(reply.read() or b"null")
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                return e.code, json.loads(text)
            except json.JSONDecodeError:
                return e.code, {"raw": text.decode(errors="replace")}

    def metrics(self) -> dict[str, float]:
        """vLLM's Prometheus metrics (``/metrics``), e.g. ``vllm:kv_cache_usage_perc`` (the pool's
        used share, 0.0 when every block is back) and ``vllm:num_requests_running``."""
        return parse_metrics(self.get("/metrics"))

    def worker_tables(self) -> list[dict[str, int]]:
        """Entries of each worker's per-request records (vToken engines only), through vLLM's dev
        endpoint ``/collective_rpc``.

        Raises:
            ServerError: the endpoint refused (not a vToken engine, or no dev mode).
        """
        status, reply = self.post("/collective_rpc", {"method": TABLE_SIZES_METHOD})
        if status != 200:
            raise ServerError(f"POST /collective_rpc {TABLE_SIZES_METHOD}: HTTP {status} {reply}")
        return reply["results"]

    def wait_idle(self, timeout: float = 60.0, poll: float = 0.5) -> dict[str, float]:
        """Wait until vLLM reports no request running or waiting and the pool unused.

        Returns:
            The last metrics read (idle ones, unless ``timeout`` passed first).
        """
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            values = self.metrics()
            busy = (values.get("vllm:num_requests_running", 0) + values.get("vllm:num_requests_waiting", 0)
                    + values.get("vllm:kv_cache_usage_perc", 0))
            if busy == 0 or time.monotonic() > deadline:
                return values
            time.sleep(poll)
