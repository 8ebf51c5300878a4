"""Tables, targets, CSV/JSON and the PNG plot of a benchmark run.

A row (one epoch of one system) is a dict; the keys used here:
system, mode, rtt_ms (None for local disk), epoch, images, seconds,
images_per_s, partial, mount_s, setup_s, proxy {get, head, list, errors},
cpu {wall, server, proxy, fs, client, other, idle}, hintfs {...} (deltas of
.hintfs/stats over the epoch), rss_kb {VmHWM, VmRSS}, errors, note.
"""

import csv
import json
import math
import textwrap

SYSTEM_ORDER = ["local", "hintfs", "hintfs-open", "hintfs-pt", "hintfs-nohint", "s3fs", "rclone",
                "ceiling"]
MODE_ORDER = ["train", "gpu", "raw"]
COLORS = {"local": "#555555", "hintfs": "#1f77b4", "hintfs-open": "#6baed6", "hintfs-pt": "#08519c",
          "hintfs-nohint": "#9ecae1",
          "s3fs": "#d62728", "rclone": "#ff7f0e", "ceiling": "#2ca02c"}


def _key(r):
    return (MODE_ORDER.index(r["mode"]) if r["mode"] in MODE_ORDER else 9,
            -1 if r.get("rtt_ms") is None else r["rtt_ms"],
            SYSTEM_ORDER.index(r["system"]) if r["system"] in SYSTEM_ORDER
            else 9, r.get("conns") or 0, r["epoch"])


def find(rows, system, mode, rtt, epoch):
    for r in rows:
        if (r["system"] == system and r["mode"] == mode and r["epoch"] == epoch
                and (system == "local" or r.get("rtt_ms") == rtt)
                and not r.get("failed")):
            return r
    return None


def ceiling(rows, rtt):
    """The best ceiling row at @rtt, or None."""
    best = None
    for r in rows:
        if (r["system"] == "ceiling" and r.get("rtt_ms") == rtt
                and not r.get("failed")):
            if best is None or r["images_per_s"] > best["images_per_s"]:
                best = r
    return best


def ratio_vs_local(rows, r):
    if r["system"] == "local":
        return 1.0
    loc = find(rows, "local", r["mode"], None, r["epoch"] if
               r["system"] != "ceiling" else 1)
    if not loc or not loc["images_per_s"] or not r.get("images_per_s"):
        return None
    return r["images_per_s"] / loc["images_per_s"]


def _f(v, fmt, width):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-".rjust(width)
    return format(v, fmt).rjust(width)


def main_table(rows, meta):
    out = []
    n = meta.get("images")
    out.append(f"Throughput: {n} JPEGs (~110 KB) in {meta.get('classes')} "
               f"classes; train = ImageFolder + DataLoader "
               f"({meta.get('workers')} workers, batch {meta.get('batch')}, "
               "RandomResizedCrop(224) + ToTensor); gpu = train + "
               f"{meta.get('sleep_ms')} ms sleep per batch; raw = file bytes "
               f"in epoch order, {meta.get('threads')} threads, open() "
               f"buffering {meta.get('raw_buffering', 0)} (-1: it asks "
               "isatty()). Epoch 1 cold, "
               "epoch 2 warm (page cache dropped before both), epochs 3 and 4 "
               "warm with the page cache kept.")
    hdr = (f"{'mode':<5} {'rtt':>4} {'system':<14} {'ep':>2} {'images':>6} "
           f"{'seconds':>8} {'img/s':>7} {'vs local':>8} {'mount s':>7} "
           f"{'GETs':>6} {'HEADs':>6} {'stalls':>6} {'stall s':>7}  note")
    out.append(hdr)
    out.append("-" * len(hdr))
    for r in sorted(rows, key=_key):
        rtt = "-" if r.get("rtt_ms") is None else str(r["rtt_ms"])
        name = r["system"]
        if name == "ceiling":
            name = f"ceiling x{r.get('conns')}"
        ratio = ratio_vs_local(rows, r)
        px = r.get("proxy") or {}
        h = r.get("hintfs") or {}
        note = r.get("note") or ""
        if r.get("partial"):
            note = ("partial: stopped at the time cap; " + note).strip("; ")
        if r.get("failed"):
            out.append(f"{r['mode']:<5} {rtt:>4} {name:<14} "
                       f"{r['epoch']:>2} FAILED: {r.get('error')}")
            continue
        mount_s = r.get("mount_s") if r["epoch"] == 1 else None
        out.append(
            f"{r['mode']:<5} {rtt:>4} {name:<14} {r['epoch']:>2} "
            f"{r['images']:>6} {_f(r['seconds'], '.1f', 8)} "
            f"{_f(r['images_per_s'], '.0f', 7)} "
            f"{_f(ratio, '.2f', 7)}{'x' if ratio is not None else ' '} "
            f"{_f(mount_s, '.2f', 7)} "
            f"{_f(px.get('get'), 'd', 6)} {_f(px.get('head'), 'd', 6)} "
            f"{_f(h.get('stalls'), 'd', 6)} "
            f"{_f(h.get('stall_s'), '.1f', 7)}  {note}")
    return "\n".join(out)


def fs_per_file(r):
    """(daemon CPU ms per file read, per GET) of a row, either None: the
    cost of the mount itself, per cold object (epoch 1: per GET) and per
    warm read (epoch 2: per file, none fetched)."""
    c = r.get("cpu") or {}
    fs, files = c.get("fs"), r.get("images")
    gets = (r.get("proxy") or {}).get("get") or 0
    if r["system"] == "ceiling" and c.get("client") is not None and gets:
        # The bare client (curl, signed GETs, bytes discarded): its CPU
        # per GET, beside the daemon's per cold object.
        return None, 1000 * c["client"] / gets
    if fs is None or r["system"] in ("local", "ceiling"):
        return None, None
    return (1000 * fs / files if files else None,
            1000 * fs / gets if gets else None)


def cpu_table(rows):
    out = ["CPU split per epoch, in CPU-seconds (the machine has "
           f"{rows[0].get('ncpu', '?') if rows else '?'} cores; 'other' is "
           "everything else busy on the machine, other users included); "
           "fs ms/file and fs ms/GET: the filesystem daemon's CPU per file "
           "read and per object fetched (ceiling: the bare curl client's "
           "CPU per GET); 1st batch: seconds from the "
           "epoch's start (hint written) to its first batch (raw: the first "
           "--batch files):"]
    hdr = (f"{'mode':<5} {'rtt':>4} {'system':<14} {'ep':>2} {'wall s':>7} "
           f"{'server':>7} {'proxy':>6} {'fs':>6} {'client':>7} "
           f"{'other':>6} {'idle':>6} {'srv ms/GET':>10} "
           f"{'fs ms/file':>10} {'fs ms/GET':>9} {'1st batch':>9} "
           f"{'load':>5}")
    out.append(hdr)
    out.append("-" * len(hdr))
    for r in sorted(rows, key=_key):
        c = r.get("cpu")
        if not c or r.get("failed"):
            continue
        rtt = "-" if r.get("rtt_ms") is None else str(r["rtt_ms"])
        name = r["system"]
        if name == "ceiling":
            name = f"ceiling x{r.get('conns')}"
        gets = (r.get("proxy") or {}).get("get") or 0
        srv_ms = (1000 * c["server"] / gets) if gets and c.get("server") \
            is not None else None
        fs_file, fs_get = fs_per_file(r)
        out.append(
            f"{r['mode']:<5} {rtt:>4} {name:<14} {r['epoch']:>2} "
            f"{_f(c.get('wall'), '.1f', 7)} {_f(c.get('server'), '.1f', 7)} "
            f"{_f(c.get('proxy'), '.1f', 6)} {_f(c.get('fs'), '.1f', 6)} "
            f"{_f(c.get('client'), '.1f', 7)} {_f(c.get('other'), '.1f', 6)} "
            f"{_f(c.get('idle'), '.1f', 6)} {_f(srv_ms, '.2f', 10)} "
            f"{_f(fs_file, '.3f', 10)} {_f(fs_get, '.3f', 9)} "
            f"{_f(r.get('first_batch_s'), '.2f', 9)} "
            f"{_f(r.get('load'), '.1f', 5)}")
    return "\n".join(out)


def first_batch_table(rows):
    """The CPU split from each cold epoch's start to its first batch: what
    the machine did while the first batch waited ('rest' holds the client
    and everything else busy)."""
    sel = [r for r in sorted(rows, key=_key)
           if r.get("epoch") == 1 and r.get("cpu_first_batch")]
    if not sel:
        return ""
    out = ["CPU split of each epoch 1 up to its first batch, in CPU-seconds "
           "('rest': the client and everything else busy):"]
    hdr = (f"{'mode':<5} {'rtt':>4} {'system':<14} {'1st batch':>9} "
           f"{'server':>7} {'proxy':>6} {'fs':>6} {'rest':>6} {'idle':>6}")
    out += [hdr, "-" * len(hdr)]
    for r in sel:
        c = r["cpu_first_batch"]
        rtt = "-" if r.get("rtt_ms") is None else str(r["rtt_ms"])
        out.append(
            f"{r['mode']:<5} {rtt:>4} {r['system']:<14} "
            f"{_f(c.get('wall'), '.2f', 9)} {_f(c.get('server'), '.2f', 7)} "
            f"{_f(c.get('proxy'), '.2f', 6)} {_f(c.get('fs'), '.2f', 6)} "
            f"{_f(c.get('other'), '.2f', 6)} {_f(c.get('idle'), '.2f', 6)}")
    return "\n".join(out)


def hintfs_table(rows):
    hr = [r for r in rows if r["system"].startswith("hintfs")
          and r.get("hintfs") and not r.get("failed")]
    if not hr:
        return ""
    out = ["hintfs counters per epoch (deltas of .hintfs/stats) and daemon "
           "memory:"]
    hdr = (f"{'mode':<5} {'rtt':>4} {'system':<14} {'ep':>2} {'reads':>7} "
           f"{'hits':>7} {'joins':>6} {'demand':>6} {'stalls':>6} "
           f"{'stall s':>7} {'GETs':>6} {'errors':>6} {'VmHWM MB':>8} "
           f"{'anon MB':>7}  FUSE requests per file")
    out.append(hdr)
    out.append("-" * len(hdr))
    for r in sorted(hr, key=_key):
        h = r["hintfs"]
        rss = (r.get("rss_kb") or {}).get("VmHWM")
        anon = (r.get("rss_kb") or {}).get("RssAnon")
        out.append(
            f"{r['mode']:<5} {r['rtt_ms']:>4} {r['system']:<14} "
            f"{r['epoch']:>2} {_f(h.get('reads'), 'd', 7)} "
            f"{_f(h.get('cache_hits'), 'd', 7)} "
            f"{_f(h.get('prefetch_joins'), 'd', 6)} "
            f"{_f(h.get('demand_fetches'), 'd', 6)} "
            f"{_f(h.get('stalls'), 'd', 6)} {_f(h.get('stall_s'), '.1f', 7)} "
            f"{_f(h.get('gets'), 'd', 6)} {_f(h.get('errors'), 'd', 6)} "
            f"{_f(rss / 1024 if rss else None, '.0f', 8)} "
            f"{_f(anon / 1024 if anon else None, '.0f', 7)}  "
            f"{fuse_per_file(h, r.get('images'))}")
    return "\n".join(out)


def fuse_per_file(h, files):
    """'2.03 (lookup 0.00, read 1.00, getattr 1.03)': the FUSE requests of
    an epoch per file read, in total and by kind (those above 0.005)."""
    f = h.get("fuse") or {}
    if not f or not files:
        return "-"
    per = {k: v / files for k, v in f.items() if v / files >= 0.005}
    body = ", ".join(f"{k} {v:.2f}" for k, v in
                     sorted(per.items(), key=lambda kv: -kv[1]))
    return f"{sum(f.values()) / files:.2f}" + (f" ({body})" if body else "")


def other_memory(rows):
    seen = {}
    for r in rows:
        rss = (r.get("rss_kb") or {}).get("VmHWM")
        if rss and r["system"] not in ("local", "ceiling"):
            k = r["system"]
            seen[k] = max(seen.get(k, 0), rss)
    if not seen:
        return ""
    return ("Daemon peak RSS (VmHWM, largest over the runs): " +
            ", ".join(f"{k} {v / 1024:.0f} MB" for k, v in
                      sorted(seen.items(), key=lambda kv:
                             SYSTEM_ORDER.index(kv[0])
                             if kv[0] in SYSTEM_ORDER else 9)))


def _line(ok, text):
    return f"{'PASS' if ok else 'MISS'}  {text}"


def targets(rows, meta):
    """PASS/MISS lines for the benchmark's targets (doc/benchmarks.md,
    "Targets not yet met"; timing is reported, never asserted). A target whose rows are missing says so."""
    out = ["Targets, measured in this run:"]
    rtt = 20 if 20 in meta.get("rtts", []) else max(meta.get("rtts") or [0])
    busy = sorted(r["cpu"]["other"] / (r["cpu"]["wall"] * r.get("ncpu", 1))
                  for r in rows if r.get("cpu") and r["cpu"].get("wall", 0) > 1)
    if busy and busy[len(busy) // 2] > 0.15:
        out.append(f"WARNING: other processes took a median "
                   f"{100 * busy[len(busy) // 2]:.0f}% of the machine's CPU "
                   "during the epochs (column 'other' above): the timings "
                   "and ratios below are noisy.")

    def ips(r):
        return r["images_per_s"] if r else None

    def missing(what):
        out.append(f"n/a   {what}: not measured in this run")

    # 1. GPU-bound training.
    loc = find(rows, "local", "gpu", None, 1)
    hf = find(rows, "hintfs", "gpu", rtt, 1)
    t1 = f"1. GPU-bound train ({meta.get('sleep_ms')} ms/batch), {rtt} ms, epoch 1"
    if loc and hf:
        x = hf["seconds"] / loc["seconds"]
        sleeps = math.ceil(loc["images"] / meta["batch"]) * meta["sleep_ms"] / 1000
        # Room for starting the workers and the first batches.
        bound = loc["seconds"] <= sleeps * 1.1 + 2
        out.append(_line(x <= 1.05, f"{t1}: hintfs {hf['seconds']:.1f} s vs "
                                    f"local {loc['seconds']:.1f} s = {x:.3f}x "
                                    "the time (target <= 1.05x)"
                                    + ("" if bound else " [not a valid test: "
                                       "local disk was not sleep-bound]")))
        out.append(f"      the sleeps alone take {sleeps:.1f} s: local disk "
                   f"{loc['seconds'] / sleeps:.2f}x that "
                   f"({'sleep-bound' if bound else 'NOT sleep-bound: the CPU was short; raise --sleep-ms-per-batch or use an idle machine'}), "
                   f"hintfs {hf['seconds'] / sleeps:.2f}x")
    else:
        missing(t1)

    # 2. Loader-bound, epoch 1.
    loc = find(rows, "local", "train", None, 1)
    hf = find(rows, "hintfs", "train", rtt, 1)
    s3 = find(rows, "s3fs", "train", rtt, 1)
    t2 = f"2. loader-bound train, {rtt} ms, epoch 1"
    if loc and hf:
        x = ips(hf) / ips(loc)
        out.append(_line(x >= 0.5, f"{t2}: hintfs {ips(hf):.0f} img/s = "
                                   f"{x:.2f}x local {ips(loc):.0f} (target >= 0.5x)"))
        if s3:
            y = ips(hf) / ips(s3)
            out.append(_line(y >= 4, f"{t2}: hintfs = {y:.1f}x s3fs "
                                     f"{ips(s3):.0f} img/s (target >= 4x)"))
        else:
            missing(f"{t2} vs s3fs")
    else:
        missing(t2)

    # 3. Loader-bound, epoch 2.
    loc = find(rows, "local", "train", None, 2)
    hf = find(rows, "hintfs", "train", rtt, 2)
    t3 = f"3. loader-bound train, {rtt} ms, epoch 2 (warm)"
    if loc and hf:
        x = ips(hf) / ips(loc)
        out.append(_line(x >= 0.95, f"{t3}: hintfs {ips(hf):.0f} img/s = "
                                    f"{x:.2f}x local {ips(loc):.0f} (target >= 0.95x)"))
    else:
        missing(t3)

    # 4. Raw vs the server's ceiling.
    ce = ceiling(rows, rtt)
    hf = find(rows, "hintfs", "raw", rtt, 1)
    t4 = f"4. raw, {rtt} ms, epoch 1"
    if ce and hf:
        x = ips(hf) / ips(ce)
        out.append(_line(x >= 0.9, f"{t4}: hintfs {ips(hf):.0f} files/s = "
                                   f"{x:.2f}x the server ceiling "
                                   f"{ips(ce):.0f} (curl, "
                                   f"{ce.get('method') or str(ce.get('conns')) + ' connections'}"
                                   ") (target >= 0.9x)"))
    else:
        missing(t4)

    # 5. No hint vs s3fs / rclone, every mode/rtt/epoch measured.
    any5 = False
    for mode in MODE_ORDER:
        for rt in meta.get("rtts", []):
            for ep in (1, 2):
                nh = find(rows, "hintfs-nohint", mode, rt, ep)
                others = [r for r in (find(rows, "s3fs", mode, rt, ep),
                                      find(rows, "rclone", mode, rt, ep)) if r]
                if not nh or not others:
                    continue
                best = max(others, key=ips)
                x = ips(nh) / ips(best)
                any5 = True
                out.append(_line(x >= 1.0, f"5. no hint, {mode} {rt} ms epoch "
                                           f"{ep}: hintfs-nohint {ips(nh):.0f} "
                                           f"= {x:.2f}x the best other "
                                           f"({best['system']} {ips(best):.0f})"
                                           " (target >= 1x)"))
    if not any5:
        missing("5. hintfs without a hint vs s3fs/rclone")
    out.append("6. daemon RSS and mount time for 10k/100k objects: "
               "`bench/bench.sh scale`")
    return "\n".join(out)


def write_csv(rows, path):
    cols = ["system", "mode", "rtt_ms", "conns", "epoch", "images", "seconds",
            "images_per_s", "ratio_vs_local", "partial", "mount_s", "setup_s",
            "proxy_get", "proxy_head", "proxy_list", "proxy_errors",
            "cpu_wall", "cpu_server", "cpu_proxy", "cpu_fs", "cpu_client",
            "cpu_other", "cpu_idle", "hintfs_stalls", "hintfs_stall_s",
            "hintfs_gets", "hintfs_cache_hits", "rss_hwm_kb",
            "fs_ms_per_file", "fs_ms_per_get", "first_batch_s", "load",
            "failed", "error", "note"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in sorted(rows, key=_key):
            px = r.get("proxy") or {}
            c = r.get("cpu") or {}
            h = r.get("hintfs") or {}
            w.writerow([
                r["system"], r["mode"], r.get("rtt_ms"), r.get("conns"),
                r["epoch"], r.get("images"), r.get("seconds"),
                r.get("images_per_s"), ratio_vs_local(rows, r)
                if not r.get("failed") else None, r.get("partial"),
                r.get("mount_s"), r.get("setup_s"), px.get("get"),
                px.get("head"), px.get("list"), px.get("errors"),
                c.get("wall"), c.get("server"), c.get("proxy"), c.get("fs"),
                c.get("client"), c.get("other"), c.get("idle"),
                h.get("stalls"), h.get("stall_s"), h.get("gets"),
                h.get("cache_hits"), (r.get("rss_kb") or {}).get("VmHWM"),
                *fs_per_file(r), r.get("first_batch_s"),
                r.get("load"), r.get("failed"), r.get("error"), r.get("note")])


def plot(rows, meta, path):
    """Grouped bars: one panel per mode, a group per (rtt, epoch), a bar
    per system; the server ceiling as a line over the raw panels."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    good = [r for r in rows if not r.get("failed") and r.get("images_per_s")]
    modes = [m for m in MODE_ORDER if any(r["mode"] == m for r in good)]
    if not modes:
        return False
    fig, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 5.2),
                             squeeze=False)
    handles = {}
    for ax, mode in zip(axes[0], modes):
        mr = [r for r in good if r["mode"] == mode]
        rtts = sorted({r["rtt_ms"] for r in mr if r.get("rtt_ms") is not None})
        if not rtts:
            rtts = [None]
        eps = sorted({r["epoch"] for r in mr}) or [1, 2]
        groups = [(rt, ep) for rt in rtts for ep in eps]
        systems = [s for s in SYSTEM_ORDER if s != "ceiling"
                   and any(r["system"] == s for r in mr)]
        width = 0.8 / max(1, len(systems))
        for si, s in enumerate(systems):
            xs, ys, hatch = [], [], []
            for gi, (rt, ep) in enumerate(groups):
                r = find(mr, s, mode, rt, ep)
                if r:
                    xs.append(gi + (si - (len(systems) - 1) / 2) * width)
                    ys.append(r["images_per_s"])
                    hatch.append(r.get("partial"))
            bars = ax.bar(xs, ys, width, label=s, color=COLORS.get(s))
            handles.setdefault(s, bars)
            for b, p, y in zip(bars, hatch, ys):
                if p:
                    b.set_hatch("//")
                ax.annotate(f"{y:.0f}", (b.get_x() + b.get_width() / 2, y),
                            ha="center", va="bottom", fontsize=6,
                            rotation=90, xytext=(0, 2),
                            textcoords="offset points")
        for gi, (rt, ep) in enumerate(groups):
            ce = ceiling(mr, rt) if ep == 1 else None
            if ce:
                h = ax.hlines(ce["images_per_s"], gi - 0.45, gi + 0.45,
                              colors=COLORS["ceiling"], linestyles="--")
                handles.setdefault("server ceiling (raw)", h)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f"{'-' if rt is None else rt} ms\nepoch {ep}"
                            for rt, ep in groups])
        title = {"train": "loader-bound training",
                 "gpu": f"GPU-bound training ({meta.get('sleep_ms'):g} ms/batch)",
                 "raw": f"raw reads ({meta.get('threads')} threads, log scale)"
                 }[mode]
        ax.set_title(title)
        ax.set_ylabel("files/s" if mode == "raw" else "images/s")
        if mode == "raw":
            ax.set_yscale("log")
        ax.margins(y=0.12)
        ax.grid(axis="y", alpha=0.3)
    # The picture is 6 inches per panel: the title, the panels' titles and
    # the legend are wrapped to that, and room is kept for them, so that
    # nothing is cut at the edges (about 10 characters per inch at 12 pt).
    fig_w, fig_h = fig.get_size_inches()
    for ax in axes[0]:
        ax.set_title("\n".join(textwrap.wrap(ax.get_title(),
                                             int(fig_w / len(modes) * 8))))
    ncol = max(1, min(len(handles), int(fig_w / 1.7)))
    fig.legend(list(handles.values()), list(handles.keys()),
               loc="lower center", ncol=ncol, fontsize=9)
    title = textwrap.wrap(f"hintfs benchmark: {meta.get('images')} JPEGs, "
                          f"{meta.get('ncpu')} cores, Ceph RGW + delay proxy "
                          "(hatched: partial epoch)", int(fig_w * 9))
    fig.suptitle("\n".join(title), fontsize=12)
    legend_rows = -(-len(handles) // ncol)
    # tight_layout keeps the suptitle clear by itself (matplotlib >= 3.3);
    # the legend at the bottom it does not know of.
    fig.tight_layout(rect=(0, (0.3 * legend_rows + 0.1) / fig_h, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_json(rows, meta, path):
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1, default=str)
