#!/usr/bin/env bash
# The wheel as a user without Rust installs it: builds it (scripts/build-wheel.sh), makes a
# fresh venv of the system's python3 (Debian's; the oldest interpreter this machine kind has),
# installs the wheel file with PATH holding no cargo and no hull, then runs code, a chart
# result, and `hull-mcp` through the official MCP client. Run as root (the box runs as the
# caller; the rootless path is covered by the SDK tests).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/hull-wheel-XXXXXX)
trap 'rm -rf "$work"' EXIT
wheel=$(bash scripts/build-wheel.sh "$work/dist")
echo "wheel-smoke.sh: $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
/usr/bin/python3 -m venv "$work/venv"
export PATH="$work/venv/bin:/usr/bin:/bin"
unset HULL_BIN
if command -v cargo >/dev/null; then echo "wheel-smoke.sh: cargo is still on PATH" >&2; exit 1; fi
"$work/venv/bin/python" -m pip install -q "$wheel" "mcp>=1.20,<2"
[ "$(command -v hull)" = "$work/venv/bin/hull" ] || { echo "wheel-smoke.sh: the wheel did not install hull on PATH" >&2; exit 1; }
cd "$work"
"$work/venv/bin/python" - <<'PY'
import asyncio, sys
import hull_sandbox
from hull_sandbox import Sandbox

print("python", sys.version.split()[0], "hull_sandbox", hull_sandbox.__version__, "hull at", hull_sandbox.find_hull())
assert hull_sandbox.find_hull().startswith(sys.prefix), hull_sandbox.find_hull()
with Sandbox() as sb:
    r = sb.run_code("print(6 * 7)")
    assert r.stdout == "42\n", r
    r = sb.run_code("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2])")
    pngs = [x.png for x in r.results if x.png]
    assert pngs and pngs[0][:8] == b"\x89PNG\r\n\x1a\n", r

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def mcp():
    params = StdioServerParameters(command="hull-mcp", args=[])
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            tools = [t.name for t in (await s.list_tools()).tools]
            assert "run_code" in tools, tools
            out = await s.call_tool("run_code", {"code": "print('from hull-mcp')"})
            text = "".join(c.text for c in out.content if c.type == "text")
            assert "from hull-mcp" in text, text

asyncio.run(asyncio.wait_for(mcp(), 180))
print("wheel-smoke.sh: run_code, a chart and hull-mcp work from the installed wheel")
PY
