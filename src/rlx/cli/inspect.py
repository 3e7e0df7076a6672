"""`rlx-bake inspect`: what a `.rlx` file or `.rlxp` package holds (meta, io, the weight
table, memory layout, ops), its checksums and its signature."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from rlx import MemoryMode, RlxFile
from rlx.artifact import read_rlx, read_rlxp_package
from rlx.artifact.crypto import is_encrypted, read_encryption_info
from rlx.artifact.layout import SCHEMA_VERSION
from rlx.artifact.output import artifact_size
from rlx.artifact.rlxp import is_rlxp
from rlx.artifact.self_test import SelfTestSection
from rlx.cli.contents import by_encoding, encryption_info, linked_constant, row_info
from rlx.cli.formatting import fmt_bytes, fmt_shape
from rlx.cli.precision import render_plan
from rlx.cli.self_test import render_self_test, self_test_data
from rlx.cli.sign import add_trusted_key_option, signature_status, trusted_keys
from rlx.cli.ui import CliError, Outcome, Ui, add_password_options, password_from
from rlx.errors import IntegrityError
from rlx.ir import format_graph
from rlx.ir.naming import COMPUTING_NODES, op_type_counts

__all__ = ["add_commands"]

_FORMATTER = argparse.RawDescriptionHelpFormatter

def add_commands(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("inspect", parents=[common], formatter_class=_FORMATTER,
                       help="show what a .rlx file holds and check its checksums",
                       description="Show meta, inputs/outputs, the weight table, the memory "
                                   "layout and the ops of a .rlx file, and verify every "
                                   "checksum (exit 1 when one fails). An encrypted file "
                                   "without a password shows its encryption parameters. "
                                   "A signed file shows the key id its .sig names; with "
                                   "--trusted-key the signature is checked too (exit 1 when "
                                   "it fails).",
                       epilog="examples:\n  rlx-bake inspect model.rlx\n"
                              "  rlx-bake inspect secret.rlx --password-env RLX_PASSWORD --json\n"
                              "  rlx-bake inspect model.rlx --trusted-key release.key.pub")
    p.add_argument("file", help="a .rlx file")
    p.add_argument("--graph", action="store_true",
                   help="also print the baked graph as text, one line per node (with --json: "
                        "as the `graph_text` lines)")
    add_password_options(p.add_argument_group("encrypted files"))
    add_trusted_key_option(p)
    p.set_defaults(run=_inspect)


def _inspect(args, ui: Ui) -> Outcome:
    password = password_from(args, ui)
    path = Path(args.file)
    package = is_rlxp(path)
    encrypted = not package and is_encrypted(path)
    data: dict[str, Any] = {"command": "inspect", "file": args.file,
                            "file_bytes": artifact_size(path), "encrypted": encrypted,
                            "encryption": encryption_info(read_encryption_info(path))
                            if encrypted else None}
    keys = trusted_keys(args)
    with ui.step("checking the signature" if keys else "looking for a signature"):
        data["signature"] = signature_status(path, keys)  # before reading: no password needed
    signature_ok = data["signature"]["valid"] is not False
    if encrypted and password is None:
        return Outcome({**data, "locked": True}, _render_locked, 0 if signature_ok else 1)
    with ui.step(f"reading {args.file}"):
        if package:
            if password is not None:
                raise CliError(f"{path} is an .rlxp package, which is never encrypted")
            opened = read_rlxp_package(path)
            file = opened.file
            data["package"] = _package_info(opened)
        else:
            file = read_rlx(path, password=password)
    with ui.step("verifying checksums"):
        try:
            file.check_integrity()
            if isinstance(file.self_test, SelfTestSection):
                file.self_test.load()  # inspect checks every checksum: the test's too
            checksums: dict[str, Any] = {"ok": True, "error": None}
        except IntegrityError as err:
            checksums = {"ok": False, "error": str(err)}
    rows = [row_info(file, w) for w in file.weights]
    meta = dataclasses.asdict(file.meta)
    del meta["nodes"]  # the header's count of IR nodes: reports count computing nodes only
    data.update({
        "locked": False, "schema": SCHEMA_VERSION, "meta": meta,
        "weights": rows, "by_encoding": by_encoding(rows),
        "memory": {"mode": file.meta.memory_mode,
                   "table_bytes": sum(w.nbytes for w in file.weights),
                   "graph_constant_bytes": file.meta.constant_bytes,
                   "needs_materialize": file.needs_materialize()},
        "computing_nodes": {"counted": COMPUTING_NODES,
                            "count": sum(op_type_counts(file.graph).values())},
        "ops": dict(sorted(op_type_counts(file.graph).items(), key=lambda kv: (-kv[1], kv[0]))),
        "checksums": checksums,
        "self_test": self_test_data(file.self_test),
        "graph_text": format_graph(file.graph, bodies=_table_rows(file)).splitlines()
        if args.graph else None,
    })
    return Outcome(data, _render_inspect, 0 if checksums["ok"] and signature_ok else 1)


def _table_rows(file: RlxFile) -> dict[int, str]:
    """Where each stripped constant's bytes are: the weight table row that holds them (a
    bare `Constant(<0 bytes, stripped>)` reads as lost)."""
    return {w.node_id: f"-> weight {w.name!r} {fmt_shape(w.shape)} {w.encoding}"
            for w in file.weights
            if w.node_id is not None and (c := linked_constant(file.graph, w)) is not None
            and c.is_stripped}


def _render_locked(d: dict, ui: Ui) -> None:
    e = d["encryption"]
    kdf = e["kdf"]
    ui.pairs(f"{d['file']}: encrypted (pass a password to see inside)", [
        ("container", f"{e['container']} version {e['version']}"),
        ("key derivation", f"{kdf['algorithm']}, memory {fmt_bytes(kdf['m_cost_kib'])} KiB, "
                           f"{kdf['t_cost']} pass(es), {kdf['p_cost']} lane(s)"),
        ("cipher", e["aead"]),
        ("chunks", f"{e['chunks']} of up to {fmt_bytes(e['chunk_size'])} bytes"),
        ("plaintext", f"{fmt_bytes(e['plaintext_bytes'])} bytes"),
        ("file", f"{fmt_bytes(e['file_bytes'])} bytes"),
        ("signature", _signature_text(d["signature"])),
    ])


def _render_inspect(d: dict, ui: Ui) -> None:
    meta, mem = d["meta"], d["memory"]
    pkg = d.get("package")
    title = f"rlxp package ({pkg['container']} container)" if pkg else f"rlx schema {d['schema']}"
    ui.pairs(f"{d['file']}: {title}", [
        ("graph", meta["name"]),
        ("file size", f"{fmt_bytes(d['file_bytes'])} bytes"
                      + (" (encrypted)" if d["encrypted"] else "")),
        ("profile", meta["profile"] or "?"),
        ("computing nodes", d["computing_nodes"]["count"]),
        ("params baked", meta["params_baked"]),
        ("params left unbound", ", ".join(meta["params_remaining"]) or "none"),
        ("zero matmuls skipped", meta["skipped_zero_matmuls"]),
        ("packed TQ2_0 / Q8_0", f"{meta['ternary_packed']} / {meta['quant_packed']}"),
        ("memory mode", f"{mem['mode']} ({MemoryMode(mem['mode']).description})"),
        ("bytes in weight table", fmt_bytes(mem["table_bytes"])),
        ("bytes in graph constants", fmt_bytes(mem["graph_constant_bytes"])),
        ("needs materialize", "yes" if mem["needs_materialize"] else "no"),
        ("checksums", "OK" if d["checksums"]["ok"] else f"FAILED: {d['checksums']['error']}"),
        ("signature", _signature_text(d["signature"])),
        ("self-test", _self_test_text(d["self_test"])),
    ])
    ui.table("inputs and outputs", ("", "name", "shape", "dtype"),
             [(kind, io["name"], fmt_shape(io["shape"]), io["dtype"])
              for kind in ("inputs", "outputs") for io in meta[kind]])
    ui.table("weight table", ("name", "encoding", "shape", "layout", "stored in", "bytes", "note"),
             [(w["name"], w["encoding"], fmt_shape(w["shape"]), w["layout"], _where(w),
               fmt_bytes(w["bytes"]), w["note"]) for w in d["weights"]], numeric=("bytes",))
    ui.table("computing nodes by op type", ("op type", "count"), d["ops"].items(),
             numeric=("count",))
    ui.line(f"({d['computing_nodes']['counted']})")
    if d["self_test"]:
        render_self_test(d["self_test"], ui)
    if meta.get("precision_plan"):
        render_plan(meta["precision_plan"], ui)
    if pkg:
        _render_package(pkg, ui)
    if d["graph_text"]:
        ui.line("")
        for line in d["graph_text"]:
            ui.line(line)


def _self_test_text(t: dict | None) -> str:
    if t is None:
        return "none (bake with --self-test to bundle one)"
    return f"{t['samples']} sample(s), {fmt_bytes(t['bytes'])} bytes; rlx-bake verify FILE runs it"


def _signature_text(s: dict) -> str:
    if s["valid"] is False:
        return f"FAILED: {s['error']}"
    if not s["signed"]:
        return "none"
    if s["checked"]:
        return f"OK: valid, by trusted key {s['key_id']}"
    return f"{s['signature']} names key {s['key_id']} (not checked: pass --trusted-key PUB)"


def _where(row: dict) -> str:
    places = [p for p, here in (("table", row["in_table"]), ("graph", row["in_graph"])) if here]
    return "+".join(places) or "nowhere"


def _package_info(package) -> dict[str, Any]:
    """What `inspect` shows of a package beyond its RlxFile: manifest, tiers, sidecars."""
    tiers: dict[str, dict[str, int]] = {}
    for row in package.tensors:
        entry = tiers.setdefault(row["tier"], {"tensors": 0, "stored_bytes": 0, "raw_bytes": 0})
        entry["tensors"] += 1
        entry["stored_bytes"] += row["stored_len"]
        entry["raw_bytes"] += row["raw_len"]
    return {"container": package.container, "manifest": package.manifest,
            "tiers": tiers, "sidecars": sorted(package.sidecars),
            "io": package.sidecars.get("io")}


def _render_package(pkg: dict[str, Any], ui: Ui) -> None:
    m = pkg["manifest"]
    ui.pairs("package", [
        ("format", f"{m['format']} {m['format_version']} (readers >= {m['compat_version']})"),
        ("producer", m["producer"]), ("created", m["created"]),
        ("graph encoding", m["graph_encoding"]), ("features", ", ".join(m["features"])),
        ("sidecars", ", ".join(pkg["sidecars"]) or "none"),
    ])
    ui.table("storage tiers", ("tier", "tensors", "stored bytes", "raw bytes"),
             [(tier, t["tensors"], fmt_bytes(t["stored_bytes"]), fmt_bytes(t["raw_bytes"]))
              for tier, t in sorted(pkg["tiers"].items())],
             numeric=("tensors", "stored bytes", "raw bytes"))
