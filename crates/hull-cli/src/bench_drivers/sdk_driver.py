# The Python side of `hull bench --sdk` and `--peers`: one process holding the SDK's sandboxes,
# timing one call per command it reads. `hull bench` sends a workload name per line and reads one
# JSON line back per sample ({"ms": ...} or {"error": ...}); it does the spacing, the
# interleaving with the other sides and the statistics. Shipped inside hull (include_str!).
#
#   python3 -c "$DRIVER" SDK BASE_IMAGE COLD_IMAGE
#   SDK: hull (hull_sandbox, served by $HULL_BIN) or kern (kern_sandbox)
#   BASE_IMAGE: the image of the prewarm and kernel workloads ("" = the SDK's default)
#   COLD_IMAGE: the image of cold_image ("" = no such workload)
import json
import sys
import time

sdk, base_image, cold_image = sys.argv[1], sys.argv[2] or None, sys.argv[3] or None


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


if sdk == "hull":
    import hull_sandbox as mod

    def sandbox(image, prewarm):
        kw = {"prewarm": prewarm}
        if image:
            kw["image"] = image
        return mod.Sandbox(**kw)

    def open_kernel(sb):
        return sb.kernel()

    def close_kernel(k):
        k.close()

    def close(sb):
        sb.destroy()
else:
    import kern_sandbox as mod

    def sandbox(image, prewarm):
        # kern pulls an image it does not have (its default one from Docker Hub): the bench
        # sends nothing off this machine, so it runs kern only on an image already in its cache.
        if not image or not mod._image_is_cached(image):
            raise RuntimeError("kern has no %r in its cache (benches/python-image.sh loads it); not pulling it" % image)
        sb = mod.Sandbox(image=image, prewarm=prewarm)
        sb.__enter__()
        return sb

    def open_kernel(sb):
        k = sb.kernel()
        k.__enter__()
        return k

    def close_kernel(k):
        k.__exit__(None, None, None)

    def close(sb):
        sb.__exit__(None, None, None)


def check_print(r):
    if r.stdout != "1\n" or r.exit_code != 0:
        raise RuntimeError("print(1) gave exit %s, stdout %r, stderr %r" % (r.exit_code, r.stdout[:200], r.stderr[-300:]))


def check_cell(r):
    text = r.results[0].text if r.results else None
    if text != "2":
        raise RuntimeError("the cell 1+1 gave %r, stdout %r, stderr %r" % (text, r.stdout[:200], r.stderr[-300:]))


made = []
try:
    warm = sandbox(base_image, 2)
    made.append(warm)
    kernels = sandbox(base_image, 2)
    made.append(kernels)
    calls = {"prewarm": lambda: check_print(warm.run_code("print(1)"))}
    if sdk == "hull":
        cold_host = sandbox(None, 0)
        made.append(cold_host)
        calls["cold_host"] = lambda: check_print(cold_host.run_code("print(1)"))
    if cold_image:
        cold_img = sandbox(cold_image, 0)
        made.append(cold_img)
        calls["cold_image"] = lambda: check_print(cold_img.run_code("print(1)"))
    kernel = open_kernel(kernels)
    check_cell(kernel.run_code("1+1"))

    def kernel_start():
        t = time.perf_counter()
        k = open_kernel(kernels)
        ms = (time.perf_counter() - t) * 1000
        close_kernel(k)
        return ms

    calls["kernel_cell"] = lambda: check_cell(kernel.run_code("1+1"))
except Exception as e:  # noqa: BLE001 - reported to hull bench, which says why the side is skipped
    say({"fatal": "%s: %s" % (type(e).__name__, e)})
    sys.exit(1)
say({"ready": sorted(list(calls) + ["kernel_start"])})

for line in sys.stdin:
    w = line.strip()
    if w == "quit":
        break
    try:
        if w == "kernel_start":
            say({"ms": kernel_start()})
            continue
        call = calls[w]
        t = time.perf_counter()
        call()
        say({"ms": (time.perf_counter() - t) * 1000})
    except Exception as e:  # noqa: BLE001 - one failed sample is reported, the driver goes on
        say({"error": "%s: %s" % (type(e).__name__, e)})
try:
    close_kernel(kernel)
finally:
    for sb in made:
        close(sb)
