#!/usr/bin/env python3
"""A screenshot of a page once it says it is done, with headless Chromium driven over the
DevTools protocol on a pipe (--remote-debugging-pipe: fds 3 and 4, no port, no websocket
library). `chromium --screenshot` alone shoots when the page has loaded, before the
page's WebGPU work (which runs after load) has finished.

Usage: web_shot.py URL OUT.png [--done JS] [--width N] [--timeout S] -- CHROMIUM [FLAGS...]
"""
import argparse
import base64
import json
import os
import subprocess
import sys
import time


def main():
    if "--" not in sys.argv:
        sys.exit(__doc__)
    split = sys.argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("out")
    ap.add_argument("--done", default="window.wgconvPage && window.wgconvPage.done")
    ap.add_argument("--width", type=int, default=1200)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args(sys.argv[1:split])
    browser = sys.argv[split + 1 :]

    # Chromium reads commands from fd 3 and writes replies to fd 4.
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()
    os.set_inheritable(to_chrome_r, True)
    os.set_inheritable(from_chrome_w, True)

    def child_fds():
        # Through fresh descriptors first: either pipe end may itself be 3 or 4.
        r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)
        os.dup2(r, 3)
        os.dup2(w, 4)

    proc = subprocess.Popen(
        browser + ["--remote-debugging-pipe", f"--window-size={args.width},900", "about:blank"],
        preexec_fn=child_fds,
        # Kept open by number after child_fds ran (subprocess closes the others after it).
        pass_fds=(3, 4),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(to_chrome_r)
    os.close(from_chrome_w)
    reader = os.fdopen(from_chrome_r, "rb", buffering=0)
    buf = b""
    next_id = 0

    def send(method, params=None, session=None):
        nonlocal buf, next_id
        next_id += 1
        msg = {"id": next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(to_chrome_w, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in buf:
                chunk = reader.read(1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                buf += chunk
            raw, buf = buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    try:
        target = send("Target.createTarget", {"url": args.url})["targetId"]
        session = send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        start = time.time()
        while True:
            r = send("Runtime.evaluate", {"expression": f"!!({args.done})", "returnByValue": True}, session)
            if r.get("result", {}).get("value"):
                break
            if time.time() - start > args.timeout:
                raise RuntimeError(f"the page was not done after {args.timeout} s")
            time.sleep(0.5)
        metrics = send("Page.getLayoutMetrics", {}, session)
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        height = int(size["height"]) + 16
        send(
            "Emulation.setDeviceMetricsOverride",
            {"width": args.width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session,
        )
        shot = send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session)
        with open(args.out, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        print(f"wrote {args.out} ({args.width}x{height}) after {time.time() - start:.1f} s")
    finally:
        try:
            send("Browser.close")
        except Exception:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
