"""ccc.check and ccc.compile: the CLI's check and compile, as functions."""
import pathlib

import pytest

import ccc

BAD = "allreduce broken(N) {\n  chunks = N\n  step s in 0 .. N - 1 {\n    rank r: sends chunk (r - s) % N to (r + 1) % N\n  }\n}\n"


def test_check_a_shipped_schedule(schedules):
    info = ccc.check(schedules / "ring.sched", ranks=4)
    assert (info.schedule, info.collective, info.ranks) == ("ring", ccc.Collective.ALLREDUCE, 4)
    assert info.steps == 6 and info.ops == 24 and info.roots == ()
    assert info.waits > 0


def test_check_a_rooted_schedule_proves_every_root_or_the_one_given(schedules):
    assert ccc.check(schedules / "ring_broadcast.sched", ranks=5).roots == (0, 1, 2, 3, 4)
    assert ccc.check(schedules / "ring_broadcast.sched", ranks=5, root=3).roots == (3,)


def test_source_as_text_equals_source_as_path(schedules):
    path = schedules / "ring.sched"
    assert ccc.check(path.read_text(), ranks=4) == ccc.check(str(path), ranks=4)
    assert ccc.compile(path.read_text(), ranks=4, emit="steps", name=str(path)) == \
        ccc.compile(path, ranks=4, emit="steps")


def test_diagnostic_error_carries_location_and_caret():
    with pytest.raises(ccc.DiagnosticError) as info:
        ccc.check(BAD, ranks=4, name="broken.sched")
    e = info.value
    assert e.file == "broken.sched" and e.line > 0 and e.column > 0 and e.message
    assert str(e).startswith(f"broken.sched:{e.line}:{e.column}: error: {e.message}")
    assert "^" in e.text
    assert isinstance(e, ccc.Error) and isinstance(e, ValueError)


def test_unreadable_file_is_a_diagnostic_error(tmp_path):
    with pytest.raises(ccc.DiagnosticError, match="missing.sched"):
        ccc.check(tmp_path / "missing.sched", ranks=2)


def test_check_gives_compiles_verdict():
    # One-shot spread over N - 1 steps verifies, but its ranks round in different orders: check
    # lowers the schedule as compile does and refuses it at the op that made the difference.
    seq = ("allreduce seq {\n  chunks 1\n  phase direct {\n"
           "    step s in 0 .. N-2 { reduce chunk 0 from input of (r + s + 1) % N }\n  }\n}\n")
    with pytest.raises(ccc.DiagnosticError, match="end with different bits") as info:
        ccc.check(seq, ranks=3, name="seq.sched")
    assert info.value.line == 4


def test_schedule_wrong_for_n_is_reported(schedules):
    # The butterfly needs a power of two.
    with pytest.raises(ccc.DiagnosticError):
        ccc.check(schedules / "butterfly.sched", ranks=3)


@pytest.mark.parametrize("emit", ["steps", "graph", "dot", "syncs", "svg", "cu"])
def test_compile_every_text_target(schedules, emit):
    out = ccc.compile(schedules / "ring.sched", ranks=4, emit=emit)
    assert isinstance(out, str) and out


def test_compile_cu_follows_dtype_and_op(schedules):
    cu = ccc.compile(schedules / "ring.sched", ranks=4, emit="cu", dtype="f64", op="max")
    assert "double" in cu and cu != ccc.compile(schedules / "ring.sched", ranks=4, emit="cu")


def test_compile_ll_emits_an_ll_kernel(schedules):
    ll = ccc.compile(schedules / "ring.sched", ranks=4, emit="cu", protocol="ll")
    assert ll.startswith("// ccc_ring_n4_f32_sum_t65536_c4_p2_ll ") and "// Protocol ll:" in ll
    assert "ccc::ll(" in ll  # the receive regions peers push into
    simple = ccc.compile(schedules / "ring.sched", ranks=4, emit="cu", protocol="simple")
    assert simple == ccc.compile(schedules / "ring.sched", ranks=4, emit="cu")  # simple is the default
    assert "Protocol ll" not in simple and "ccc::ll(" not in simple


@pytest.mark.parametrize("kwargs, match", [
    ({"emit": "exe"}, "unknown emit target 'exe'"),
    ({"dtype": "f8"}, "unknown dtype 'f8'"),
    ({"op": "xor"}, r"unknown op 'xor' \(one of: sum, prod, min, max, avg\)"),
    ({"protocol": "fast"}, r"unknown protocol 'fast' \(one of: simple, ll\)"),
    ({"tile_bytes": 100}, "multiple of 64"),
    ({"channels": 0}, "channels must be"),
    ({"pipeline": 0}, "pipeline must be"),
    ({"emit": "cu", "show_syncs": True}, "show_syncs is for emit='svg'"),
])
def test_compile_refuses_bad_options(schedules, kwargs, match):
    with pytest.raises(ccc.InvalidArgumentError, match=match):
        ccc.compile(schedules / "ring.sched", ranks=4, **kwargs)


def test_source_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match="expected a path or schedule text"):
        ccc.check(42, ranks=2)


def test_compile_cost_prices_the_schedule_on_a_topology(schedules):
    topo = schedules.parent / "topologies" / "dgx-h100.topo"
    rows = ccc.compile(schedules / "oneshot.sched", ranks=8, emit="cost", topology=str(topo)).splitlines()
    assert rows[0].split("\t") == ["bytes", "schedule", "protocol", "time_us", "busbw_gbps", "serial_latencies",
                                   "channels", "tile_bytes", "launch_us"]
    # Small messages go over ll (data and flag in one store), large ones over simple (ll's cap).
    assert len(rows) == 29 and rows[1].split("\t")[:3] == ["8", "oneshot", "ll"]
    assert rows[-1].split("\t")[:3] == ["1073741824", "oneshot", "simple"]
    pinned = ccc.compile(schedules / "oneshot.sched", ranks=8, emit="cost", topology=str(topo), channels=2)
    assert all(row.split("\t")[6] == "2" for row in pinned.splitlines()[1:])
    for protocol in ("ll", "simple"):  # pinned: every size is priced over it, as --protocol does
        pinned = ccc.compile(schedules / "oneshot.sched", ranks=8, emit="cost", topology=str(topo), protocol=protocol)
        assert {row.split("\t")[2] for row in pinned.splitlines()[1:]} == {protocol}
    with pytest.raises(ccc.InvalidArgumentError, match="needs topology="):
        ccc.compile(schedules / "oneshot.sched", ranks=8, emit="cost")
    with pytest.raises(ccc.InvalidArgumentError, match="topology= is for emit='cost'"):
        ccc.compile(schedules / "oneshot.sched", ranks=8, emit="steps", topology=str(topo))


def test_enums_and_their_names_are_interchangeable(schedules):
    ring = schedules / "ring.sched"
    typed = ccc.compile(ring, ranks=4, emit="cu", dtype=ccc.DataType.BF16, op=ccc.ReduceOp.AVG,
                        protocol=ccc.Protocol.LL)
    assert typed == ccc.compile(ring, ranks=4, emit="cu", dtype="bf16", op="avg", protocol="ll")
    assert typed.startswith("// ccc_ring_n4_bf16_avg_")
    assert [m.name for m in ccc.Collective] == ["ALLREDUCE", "REDUCE_SCATTER", "ALLGATHER", "BROADCAST", "REDUCE",
                                                "ALLTOALL"]
    assert len(ccc.DataType) == 12 and len(ccc.ReduceOp) == 5 and len(ccc.Protocol) == 2
    info = ccc.check(ring, ranks=4)
    assert repr(info).startswith("CheckResult(schedule='ring', collective=Collective.ALLREDUCE, ranks=4, roots=()")
    with pytest.raises(ccc.InvalidArgumentError, match=r"unknown dtype 3 \(one of: f64, f32, "):
        ccc.compile(ring, ranks=4, dtype=3)


def test_the_extension_ships_type_stubs_that_cover_it():
    import ast
    stub = pathlib.Path(ccc._ccc.__file__).with_name("_ccc.pyi")
    tree = ast.parse(stub.read_text())
    defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert {name for name in dir(ccc._ccc) if not name.startswith("_")} <= defined
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for enum in (ccc.DataType, ccc.ReduceOp, ccc.Protocol, ccc.Collective):
        body = classes[enum.__name__].body
        members = {t.id for node in body if isinstance(node, ast.Assign) for t in node.targets}
        members |= {node.target.id for node in body if isinstance(node, ast.AnnAssign)}
        assert {m.name for m in enum} <= members, enum.__name__
    compile_stub = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "compile")
    kwonly = {a.arg: ast.unparse(a.annotation) for a in compile_stub.args.kwonlyargs}
    assert kwonly["dtype"] == "DataType" and kwonly["op"] == "ReduceOp", kwonly
