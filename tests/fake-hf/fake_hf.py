#!/usr/bin/env python3
"""A stand-in for Hugging Face, for the model store's tests (a test double).

It serves repositories described by a JSON file on two loopback servers, as
Hugging Face does with its hub and its file CDN:

- hub: GET /api/models/OWNER/REPO/tree/REV     the file list (LFS files with sha256)
       HEAD|GET /OWNER/REPO/resolve/REV/FILE  small files directly; LFS files with a
                                               302 to the CDN, under another host name
                                               (localhost), and X-Linked-Etag (their
                                               sha256), X-Linked-Size, X-Repo-Commit
- cdn: HEAD|GET /cdn/OWNER/REPO/FILE           the bytes, with Range and If-Range

Repository description (JSON):
  {"token": "secret",                          the token gated repositories need
   "repos": {"OWNER/REPO": {"gated": false,     a 401/403 GatedRepo without the token
                            "private": false,   a 401/404 RepoNotFound without the token
     "files": {"NAME": {"text": "...",          the file's content
                        "repeat": 1,            repeated this many times
                        "lfs": true,            served from the CDN (default true for .rkllm)
                        "sha256": "...",        publish this instead of the true sha256
                        "cut": 1,               cut the first N downloads halfway
                        "slow": 1,              send the first N downloads at 1 byte per second
                        "declared": 1000,       declare this size (listing, X-Linked-Size) and
                                                send the body without Content-Length
                        "undeclared": true}}}}} declare no size at all (nor Content-Length)

Hostile modes are off unless a file asks for them. A file's NAME is listed as
given, so a name such as "../../x.rknn" is how a hostile listing is played.

Every request is appended to the log file as a JSON line (server, method, path,
range). On start it prints "HUB_PORT CDN_PORT" on stdout.

Usage: fake_hf.py REPOS.json LOG_FILE
"""

import hashlib
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

REPOS_FILE, LOG_FILE = sys.argv[1], sys.argv[2]
with open(REPOS_FILE, encoding="utf-8") as f:
    CONFIG = json.load(f)
TOKEN = CONFIG.get("token", "")
LOCK = threading.Lock()
CUTS = {}
SLOWS = {}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def content(spec):
    return (spec.get("text", "") * spec.get("repeat", 1)).encode("utf-8")


def files_of(repo):
    return CONFIG["repos"].get(repo, {}).get("files", {})


def is_lfs(name, spec):
    return spec.get("lfs", name.endswith(".rkllm"))


def declared_size(spec, data):
    """The size the hub declares for a file: its own, another, or none."""
    if spec.get("undeclared"):
        return None
    return spec.get("declared", len(data))


def hostile_length(spec):
    """Whether the CDN sends the body without Content-Length (until it closes)."""
    return spec.get("undeclared") or "declared" in spec


def take(counters, key, spec, field):
    """Whether this download is one of the first N that `field` names."""
    with LOCK:
        left = counters.get(key, spec.get(field, 0))
        if left > 0:
            counters[key] = left - 1
        return left > 0


def log(server, handler):
    entry = {
        "server": server,
        "method": handler.command,
        "path": handler.path,
        "range": handler.headers.get("Range"),
        "authorization": handler.headers.get("Authorization") is not None,
    }
    with LOCK, open(LOG_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_name = "hub"

    def log_message(self, *args):  # quiet
        pass

    def send_json(self, status, value, extra=None):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, val in (extra or {}).items():
            self.send_header(key, val)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def authorized(self, repo, private=False):
        if not CONFIG["repos"].get(repo, {}).get("private" if private else "gated"):
            return True
        return self.headers.get("Authorization") == f"Bearer {TOKEN}"

    def refuse(self, repo):
        """How Hugging Face refuses `repo`, if it does: a missing (or private)
        repository is a 401 to an anonymous request and a 404 to one with a
        token, both with X-Error-Code RepoNotFound; a gated one is a 401
        (anonymous) or 403 (a token without access) with GatedRepo."""
        has_token = self.headers.get("Authorization") is not None
        if repo not in CONFIG["repos"] or CONFIG["repos"][repo].get("private") and not self.authorized(repo, True):
            status = 404 if has_token else 401
            return lambda: self.send_json(status, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
        if not self.authorized(repo):
            status = 403 if has_token else 401
            return lambda: self.send_json(status, {"error": "Access to this repository is restricted"},
                                          {"X-Error-Code": "GatedRepo"})
        return None

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        log(self.server_name, self)
        path = urlparse(self.path).path
        parts = path.strip("/").split("/")
        if self.server_name == "cdn":
            return self.cdn(parts)
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "tree":
            repo = "/".join(parts[2:4])
            refused = self.refuse(repo)
            if refused:
                return refused()
            listing = []
            for name, spec in files_of(repo).items():
                data = content(spec)
                entry = {"type": "file", "path": name, "size": len(data), "oid": "f" * 40}
                size = declared_size(spec, data)
                if size is not None:
                    entry["size"] = size
                else:
                    del entry["size"]
                if is_lfs(name, spec):
                    entry["lfs"] = {"oid": spec.get("sha256", hashlib.sha256(data).hexdigest()),
                                    "pointerSize": 134}
                    if size is not None:
                        entry["lfs"]["size"] = size
                    entry["size"] = 134
                listing.append(entry)
            return self.send_json(200, listing)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, name = "/".join(parts[:2]), "/".join(parts[4:])
            refused = self.refuse(repo)
            if refused:
                return refused()
            spec = files_of(repo).get(name)
            if spec is None:
                return self.send_json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
            data = content(spec)
            if is_lfs(name, spec):
                sha = spec.get("sha256", hashlib.sha256(data).hexdigest())
                cdn_port = self.server.cdn_port
                self.send_response(302)
                self.send_header("Location", f"http://localhost:{cdn_port}/cdn/{repo}/{name}")
                self.send_header("X-Linked-Etag", f'"{sha}"')
                size = declared_size(spec, data)
                if size is not None:
                    self.send_header("X-Linked-Size", str(size))
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", '"pointer"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("ETag", '"' + hashlib.sha1(data).hexdigest() + '"')
            self.send_header("X-Repo-Commit", COMMIT)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            return None
        return self.send_json(404, {"error": "not found"})

    def cdn(self, parts):
        if len(parts) < 4 or parts[0] != "cdn":
            return self.send_json(404, {"error": "not found"})
        repo, name = "/".join(parts[1:3]), "/".join(parts[3:])
        spec = files_of(repo).get(name)
        if spec is None:
            return self.send_json(404, {"error": "not found"})
        data = content(spec)
        etag = '"' + hashlib.sha256(data).hexdigest() + '"'
        start = 0
        ranged = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if ranged and ranged.startswith("bytes=") and (if_range is None or if_range.strip() == etag
                                                       or if_range.strip('"') == spec.get("sha256", "")
                                                       or if_range.strip('"') == hashlib.sha256(data).hexdigest()):
            start = int(ranged[len("bytes="):].split("-")[0])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
        body = data[start:]
        self.send_response(206 if start else 200)
        if hostile_length(spec):
            # The body runs until the connection closes, whatever was declared.
            self.close_connection = True
            self.send_header("Connection", "close")
        else:
            self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if self.command == "HEAD":
            return None
        key = (repo, name)
        if take(SLOWS, key, spec, "slow"):
            # One byte a second, for as long as the client listens.
            try:
                for at in range(len(body)):
                    self.wfile.write(body[at:at + 1])
                    self.wfile.flush()
                    time.sleep(1)
            except OSError:
                pass
            self.close_connection = True
            return None
        if take(CUTS, key, spec, "cut"):
            # Half the body, then the connection goes.
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return None
        # In pieces, so that progress has something to report.
        try:
            for at in range(0, len(body), 64 * 1024):
                self.wfile.write(body[at:at + 64 * 1024])
        except OSError:
            # The client stopped reading (a limit cut the download).
            self.close_connection = True
        return None


class CdnHandler(Handler):
    server_name = "cdn"


def main():
    hub = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    cdn = ThreadingHTTPServer(("127.0.0.1", 0), CdnHandler)
    hub.cdn_port = cdn.server_address[1]
    for server in (hub, cdn):
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print(hub.server_address[1], cdn.server_address[1], flush=True)
    try:
        sys.stdin.read()  # runs until its stdin closes
    finally:
        hub.shutdown()
        cdn.shutdown()


if __name__ == "__main__":
    main()
