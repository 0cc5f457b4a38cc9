"""Debian's nginx serving a recording (servers/record.py) as static files, with the run's requests
mapped to file paths: `<path>?<query>` is the file `files/<path>/@<query>` (try_files), or for a query
too long to be a file name, the file a `map` names. One worker process, Debian's defaults otherwise
(keep-alive connections closed after 1,000 requests, sendfile).

Latency: the echo module's `echo_sleep` (Debian's libnginx-mod-http-echo), a timer in the event loop,
then `echo_exec` hands the request to the static file handler; no proxy in between. Sign-in is answered
by `echo` with two Set-Cookie headers. nginx serves files to GET only: the POSTs of the reference
lookups (a few per run) go through one proxy hop, as GETs, to a second server block serving the same
files. A request the recording lacks is proxied to the emulator (with a session of its own) and logged in
misses.log.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import httpx

ECHO_MODULE = Path("/usr/lib/nginx/modules/ngx_http_echo_module.so")


def missing() -> str | None:
    """Why nginx cannot run here, or None."""
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        return "nginx is not installed (make bench-tools: Debian's nginx-light)"
    if not ECHO_MODULE.exists():
        return "nginx's echo module is not installed (make bench-tools: libnginx-mod-http-echo)"
    return None


def _binary() -> str:
    return shutil.which("nginx") or "/usr/sbin/nginx"


def config(
    root: Path, work: Path, port: int, files_port: int, latency: float, fallback: str, cookie: str
) -> str:
    long = json.loads((root / "long.json").read_text())
    bucket = 64
    while bucket < max([len(k) for k in long] or [0]) + 64:
        bucket *= 2
    entries = "\n".join(f'    "{uri}" "{file}";' for uri, file in long.items())
    delay = f"echo_sleep {latency:.3f};" if latency else ""
    # With no latency the files are served straight away; the echo module adds nothing then.
    api = f"{delay} echo_exec @files;" if latency else 'try_files $long_file "/files$uri/@$args" @miss;'
    fallback_host = fallback.split("://", 1)[1]
    return f"""
load_module {ECHO_MODULE};
worker_processes 1;
error_log {work}/error.log warn;
pid {work}/nginx.pid;
daemon off;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  default_type application/json;
  sendfile on;
  tcp_nopush on;
  client_body_temp_path {work}/tmp; proxy_temp_path {work}/tmp; fastcgi_temp_path {work}/tmp;
  uwsgi_temp_path {work}/tmp; scgi_temp_path {work}/tmp;
  map_hash_bucket_size {bucket};
  map $request_uri $long_file {{
    default "";
{entries}
  }}
  upstream emulator {{ server {fallback_host}; keepalive 4; }}
  upstream files {{ server 127.0.0.1:{files_port}; keepalive 4; }}
  server {{
    listen 127.0.0.1:{port} backlog=128;
    root {root};
    location ~ /auth/login$ {{
      add_header Set-Cookie "SEMSESSIONID=nginx-session; Path=/; HttpOnly";
      add_header Set-Cookie "issToken=nginx-token; Path=/";
      {delay}
      echo '{(root / "login.json").read_text().strip().replace("'", "")}';
    }}
    location = /_bench/nothing {{ return 204; }}
    location / {{ error_page 405 = @post; {api} }}
    location @files {{
      error_page 405 = @post;
      try_files $long_file "/files$uri/@$args" @miss;
    }}
    location @post {{
      proxy_method GET; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://files;
    }}
    location @miss {{
      access_log {work}/misses.log;
      proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Cookie "{cookie}";
      proxy_pass http://emulator;
    }}
  }}
  server {{
    listen 127.0.0.1:{files_port};
    root {root};
    location / {{ try_files $long_file "/files$uri/@$args" @miss; }}
    location @miss {{
      access_log {work}/misses.log;
      proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Cookie "{cookie}";
      proxy_pass http://emulator;
    }}
  }}
}}
"""


class Nginx:
    """nginx in a child process, serving `root` at `url`, answers delayed by `latency` seconds."""

    def __init__(
        self, root: Path, work: Path, port: int, files_port: int, fallback: str, fallback_cookie: str
    ) -> None:
        self.root, self.work, self.port, self.files_port = root, work, port, files_port
        self.fallback, self.fallback_cookie = fallback, fallback_cookie
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        (work / "tmp").mkdir(parents=True, exist_ok=True)

    def start(self, latency: float) -> None:
        self.stop()
        conf = self.work / "nginx.conf"
        conf.write_text(
            config(
                self.root, self.work, self.port, self.files_port, latency, self.fallback, self.fallback_cookie
            )
        )
        self.proc = subprocess.Popen(
            [_binary(), "-c", str(conf), "-p", str(self.work)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.work / "stderr.log", "ab"),  # noqa: SIM115
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                httpx.get(self.url + "/_bench/nothing", timeout=1).raise_for_status()
                return
            except httpx.HTTPError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "nginx did not start: " + (self.work / "error.log").read_text()[-800:]
                    ) from None
                time.sleep(0.05)

    def misses(self) -> int:
        log = self.work / "misses.log"
        return len(log.read_bytes().splitlines()) if log.exists() else 0

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None
