"""How many times each op of a compiled XLA program runs: while loops read from the scheduled HLO text.

libtpu's static profile prices every HLO op once, so an op in a while loop's body is priced for one trip: 1p's
baseline (attention through lax.map over 16 query blocks) profiled at a sixteenth of its body's work. This module
reads each while loop's trip count from the program (XLA's known_trip_count where the backend prints it, else the
counter pattern every jax loop lowers to: a counter starting at a constant, stepped by a constant, compared with a
constant) and gives each op the product of the trip counts of the loops around it. A loop whose count cannot be
read is named, never guessed.
"""

from __future__ import annotations

import math
import re

__all__ = ["parse", "op_trips", "Loop"]

_HEADER = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"(?:\(.*?\)|\S+)\s+([\w-]+)\((.*?)\)")
_KNOWN = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)')
_CALLED = re.compile(r"\b(?:calls|to_apply|body|condition|branch_computations|called_computations)=\{?"
                     r"((?:%[\w.\-]+(?:,\s*)?)+)")
_PASS_THROUGH = {"copy", "bitcast", "convert", "reshape"}


class Loop(dict):
    """{name, computation (where the while op sits), body, condition, trip_count (None: unknown), why}."""


def parse(hlo_text: str) -> dict[str, dict[str, dict]]:
    """{computation: {instruction name: {opcode, operands, line, root}}} of a scheduled HLO module's text."""
    comps: dict[str, dict[str, dict]] = {}
    current = None
    for line in hlo_text.splitlines():
        head = _HEADER.match(line)
        if head and not line.startswith(" "):
            current = comps.setdefault(head.group(1), {})
            continue
        if line.startswith("}"):
            current = None
            continue
        if current is None:
            continue
        m = _INSTR.match(line)
        if not m:
            continue
        rest = m.group(2).split(", metadata=")[0]
        op = _OPCODE.match(rest)
        operands = re.findall(r"%([\w.\-]+)", op.group(2)) if op else []
        current[m.group(1)] = {"opcode": op.group(1) if op else "", "operands": operands, "line": m.group(2),
                               "root": line.lstrip().startswith("ROOT ")}
    return comps


def op_trips(hlo_text: str) -> tuple[dict[str, int], list[Loop]]:
    """({op name: times it runs, for every op that runs more than once}, every while loop found).

    Nested loops multiply, and a computation runs as often as the op calling it. An op inside a loop whose count
    cannot be read maps to -1: the caller cannot price it and must say so.
    """
    comps = parse(hlo_text)
    where = {name: comp for comp, instrs in comps.items() for name in instrs}
    loops: list[Loop] = []
    for comp, instrs in comps.items():
        for name, ins in instrs.items():
            if ins["opcode"] != "while":
                continue
            body = re.search(r"\bbody=%([\w.\-]+)", ins["line"])
            cond = re.search(r"\bcondition=%([\w.\-]+)", ins["line"])
            loop = Loop(name=name, computation=comp, body=body.group(1) if body else None,
                        condition=cond.group(1) if cond else None, trip_count=None, why=None)
            loop["trip_count"], loop["why"] = _trip_count(ins, comps, instrs)
            loops.append(loop)
    # Each computation runs as often as the op that calls it: a while loop's body and condition once per trip, a
    # called computation (call, conditional branches, fusions, reducers) once per run of its caller.
    caller: dict[str, tuple[str, Loop | None]] = {}
    for comp, instrs in comps.items():
        for ins in instrs.values():
            for group in _CALLED.findall(ins["line"]):
                for callee in re.findall(r"%([\w.\-]+)", group):
                    caller.setdefault(callee, (comp, None))
    for loop in loops:
        for c in (loop["body"], loop["condition"]):
            if c:
                caller[c] = (loop["computation"], loop)
    memo: dict[str, int | None] = {}

    def factor(comp: str, seen: frozenset = frozenset()) -> int | None:
        if comp in memo:
            return memo[comp]
        if comp not in caller or comp in seen:
            return 1
        parent, loop = caller[comp]
        outer = factor(parent, seen | {comp})
        if loop is not None:
            outer = None if outer is None or loop["trip_count"] is None else outer * loop["trip_count"]
        memo[comp] = outer
        return outer

    trips: dict[str, int] = {}
    for name, comp in where.items():
        f = factor(comp)
        if f is None:
            trips[name] = -1  # inside a loop of unknown count: the caller must say so
        elif f != 1:
            trips[name] = f
    return trips, loops


def _trip_count(ins: dict, comps: dict, instrs: dict) -> tuple[int | None, str | None]:
    known = _KNOWN.search(ins["line"])
    if known:
        return int(known.group(1)), None
    cond = re.search(r"\bcondition=%([\w.\-]+)", ins["line"])
    body = re.search(r"\bbody=%([\w.\-]+)", ins["line"])
    if not cond or not body or cond.group(1) not in comps or body.group(1) not in comps:
        return None, "the loop's condition or body is not in the program text"
    cc, bc = comps[cond.group(1)], comps[body.group(1)]
    root = next((i for i in cc.values() if i["root"]), None)
    if root is None or root["opcode"] != "compare" or len(root["operands"]) != 2:
        return None, "the loop's condition is not a comparison of its counter with a constant"
    direction = re.search(r"direction=(\w+)", root["line"])
    sides = [_resolve(o, cc) for o in root["operands"]]
    kinds = [s[0] for s in sides]
    if sorted(kinds) != ["const", "index"] or not direction:
        return None, "the loop's condition is not a comparison of its counter with a constant"
    d = direction.group(1)
    if kinds[0] == "const":  # N > i  is  i < N
        d = {"GT": "LT", "GE": "LE", "LT": "GT", "LE": "GE"}.get(d, d)
        sides.reverse()
    index, bound = sides[0][1], sides[1][1]
    init = _init_value(ins, instrs, index)
    step = _step(bc, index)
    if init is None:
        return None, f"the loop counter (tuple element {index}) does not start at a constant"
    if not step:
        return None, f"the loop counter (tuple element {index}) is not stepped by a constant"
    if d in ("LT", "LE") and step > 0:
        n = math.ceil((bound - init + (1 if d == "LE" else 0)) / step)
    elif d in ("GT", "GE") and step < 0:
        n = math.ceil((init - bound + (1 if d == "GE" else 0)) / -step)
    elif d == "NE" and (bound - init) % step == 0:
        n = (bound - init) // step
    else:
        return None, f"the loop's comparison ({d}) and step ({step}) do not bound it"
    return max(int(n), 0), None


def _resolve(name: str, instrs: dict) -> tuple[str, int | None]:
    """('const', value), ('index', tuple element of the computation's parameter) or ('other', None)."""
    for _ in range(16):
        ins = instrs.get(name)
        if ins is None:
            return "other", None
        op = ins["opcode"]
        if op == "constant":
            value = re.search(r"constant\((-?\d+)\)", ins["line"])
            return ("const", int(value.group(1))) if value else ("other", None)
        if op == "get-tuple-element":
            index = re.search(r"\bindex=(\d+)", ins["line"])
            src = instrs.get(ins["operands"][0]) if ins["operands"] else None
            if index and src is not None and src["opcode"] == "parameter":
                return "index", int(index.group(1))
            return "other", None
        if op in _PASS_THROUGH and ins["operands"]:
            name = ins["operands"][0]
            continue
        return "other", None
    return "other", None


def _init_value(ins: dict, instrs: dict, index: int) -> int | None:
    if not ins["operands"]:
        return None
    init = instrs.get(ins["operands"][0])
    if init is None or init["opcode"] != "tuple" or index >= len(init["operands"]):
        return None
    kind, value = _resolve(init["operands"][index], instrs)
    return value if kind == "const" else None


def _step(body: dict, index: int) -> int | None:
    root = next((i for i in body.values() if i["root"]), None)
    if root is None or root["opcode"] != "tuple" or index >= len(root["operands"]):
        return None
    name = root["operands"][index]
    for _ in range(16):
        ins = body.get(name)
        if ins is None:
            return None
        if ins["opcode"] in _PASS_THROUGH and ins["operands"]:
            name = ins["operands"][0]
            continue
        break
    if ins["opcode"] not in ("add", "subtract") or len(ins["operands"]) != 2:
        return None
    a, b = (_resolve(o, body) for o in ins["operands"])
    if ins["opcode"] == "add":
        if a == ("index", index) and b[0] == "const":
            return b[1]
        if b == ("index", index) and a[0] == "const":
            return a[1]
    elif a == ("index", index) and b[0] == "const":
        return -b[1]
    return None
