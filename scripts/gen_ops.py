#!/usr/bin/env python3
"""Writes every per-op layer of koila from its operator table, src/ops/ops.toml.

    python3 scripts/gen_ops.py            rewrite the generated files (and regions)
    python3 scripts/gen_ops.py --check    exit 1, naming them, when one is stale

Whole files it writes say so in their first line; in include/koila.h and the Java Tensor
class it writes the part between two marker lines. After a change to koila.h, the raw
binding layers follow with bindings/rust/koila-sys/generate.sh and
bindings/julia/Koila.jl/gen/generate.py (ctest checks those too).
"""
import argparse
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
TABLE = "src/ops/ops.toml"
STAMP = "Generated from src/ops/ops.toml by scripts/gen_ops.py; edit the table, not this file."


class TableError(Exception):
    pass


# ---------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------

ARG = re.compile(r"(?P<type>tensors|tensor\??|double|int64|dim|flag|ints|dims|shape|ints(?P<n>\d)(?P<opt>\?)?|reduction)"
                 r"\s+(?P<name>\w+)(?:\[(?P<count>\w+)\])?(?:\s+\((?P<msg>\w+)\))?(?:\s*=\s*(?P<fallback>[\w.-]+))?$")


class Arg:
    def __init__(self, spec, op):
        m = ARG.match(spec.strip())
        if not m:
            raise TableError(f"{op}: argument '{spec.strip()}' not understood")
        t = m.group("type")
        self.name = m.group("name")
        self.msg = m.group("msg") or self.name
        self.count = m.group("count")
        self.fallback = m.group("fallback")
        self.n = int(m.group("n")) if m.group("n") else None
        if self.n is not None:
            self.type = "intsN?" if m.group("opt") else "intsN"
        else:
            self.type = t
        needs_count = self.type in ("tensors", "ints", "dims", "shape")
        if needs_count != (self.count is not None):
            raise TableError(f"{op}: argument '{self.name}': a count goes with tensors, ints, dims and shape only")
        if (self.type == "intsN?") != (self.fallback is not None):
            raise TableError(f"{op}: argument '{self.name}': a fallback goes with an optional intsN? only")

    @property
    def is_tensor(self):
        return self.type in ("tensor", "tensor?")


class Op:
    def __init__(self, d, groups):
        self.d = d
        self.name = d["name"]
        if d.get("group") not in groups:
            raise TableError(f"{self.name}: unknown group {d.get('group')!r}")
        self.group = d["group"]
        self.args = [Arg(s, self.name) for s in d["args"].split(",")]
        names = [a.name for a in self.args]
        if len(set(names)) != len(names):
            raise TableError(f"{self.name}: an argument is named twice")
        for a in self.args:
            if a.type == "intsN?" and not re.fullmatch(r"-?\d+", a.fallback) and a.fallback not in names:
                raise TableError(f"{self.name}: fallback {a.fallback} is neither a number nor an argument")
        self.decode = d.get("decode", names)
        if sorted(self.decode) != sorted(names):
            raise TableError(f"{self.name}: decode must list every argument once")
        self.checks = d.get("checks", [])
        for c in self.checks:
            where = c.get("after", c.get("before"))
            if where not in names or "code" not in c:
                raise TableError(f"{self.name}: a check needs `after` or `before` an argument, and `code`")
        self.family = d.get("family")
        if self.family not in (None, "binary", "scalar", "unary"):
            raise TableError(f"{self.name}: unknown family {self.family}")
        if self.family and "reference" not in d:
            raise TableError(f"{self.name}: an op of a family needs a reference")
        if "doc" not in d:
            raise TableError(f"{self.name}: no doc")
        self.bind = dict(d.get("bind", {}))
        if self.family == "binary":
            self.bind.setdefault("b", "other")
        self.static = d.get("static", False) or not self.args[0].is_tensor

    def bound(self, arg):
        return self.bind.get(arg.name, arg.name)


def load(root, table_path=None):
    with open(table_path or root / TABLE, "rb") as f:
        table = tomllib.load(f)
    groups = {g["id"]: g for g in table["group"]}
    ops = [Op(d, groups) for d in table["op"]]
    seen = set()
    for op in ops:
        if op.name in seen:
            raise TableError(f"{op.name}: described twice")
        seen.add(op.name)
    order = list(groups)
    for a, b in zip(ops, ops[1:]):
        if order.index(a.group) > order.index(b.group):
            raise TableError(f"{b.name}: ops are listed group by group, in the groups' order")
    return table["group"], ops


def camel(name):
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def wrap(words, first, indent, width, sep=", ", end=""):
    """Packs `words` after `first`, continuing lines after `indent` (a prefix, or a number of
    spaces), within `width`."""
    prefix = indent if isinstance(indent, str) else " " * indent
    if not words:
        return [first + end]
    lines, line = [], first
    for i, w in enumerate(words):
        piece = w + (sep.rstrip() if i + 1 < len(words) else end)
        candidate = line + ("" if line == first else " ") + piece
        if line != first and len(candidate) > width:
            lines.append(line)
            line = prefix + piece
        else:
            line = candidate
    lines.append(line)
    return lines


# ---------------------------------------------------------------------------------------
# koila.h: the operators' declarations
# ---------------------------------------------------------------------------------------

H_BEGIN = "/* Generated from src/ops/ops.toml by scripts/gen_ops.py: edit the table, not this part. */"
H_END = "/* End of the generated operators. */"


def c_params(op):
    out = ["koila_tensor **out"]
    for a in op.args:
        if a.is_tensor:
            out.append(f"const koila_tensor *{a.name}")
        elif a.type == "tensors":
            out += [f"koila_tensor *const *{a.name}", f"size_t {a.count}"]
        elif a.type == "double":
            out.append(f"double {a.name}")
        elif a.type in ("int64", "dim"):
            out.append(f"int64_t {a.name}")
        elif a.type == "flag":
            out.append(f"int {a.name}")
        elif a.type in ("ints", "dims", "shape"):
            out += [f"const int64_t *{a.name}", f"size_t {a.count}"]
        elif a.type in ("intsN", "intsN?"):
            out.append(f"const int64_t *{a.name}")
        elif a.type == "reduction":
            out.append(f"koila_reduction {a.name}")
    return out


def comment(text, width=92):
    lines = wrap(text.split(), "/* ", "   ", width, sep=" ")
    lines[-1] += " */"
    return lines


def koila_h_region(groups, ops):
    out = [H_BEGIN, ""]
    for g in groups:
        members = [op for op in ops if op.group == g["id"]]
        if not members:
            continue
        out += comment(g["c_doc"])
        for op in members:
            if "c_doc" in op.d:
                out += comment(op.d["c_doc"])
            first = f"KOILA_API koila_status *koila_{op.name}("
            out += wrap(c_params(op), first, len(first), 104, end=");")
        out.append("")
    out.append(H_END)
    return "\n".join(out) + "\n"


def replace_region(text, begin, end, body, path):
    try:
        start = text.index(begin)
        stop = text.index(end, start) + len(end) + 1
    except ValueError:
        raise TableError(f"{path}: the generated part's marker lines are missing")
    return text[:start] + body + text[stop:]


# ---------------------------------------------------------------------------------------
# The C entries (src/api/op_entries.cpp) and the engine's declarations (src/ops/ops.h)
# ---------------------------------------------------------------------------------------

def engine_type(a):
    return {
        "tensor": "const NodePtr&", "tensor?": "const NodePtr&", "tensors": "const std::vector<NodePtr>&",
        "double": "double", "int64": "int64_t", "dim": "int64_t", "flag": "bool",
        "ints": "std::vector<int64_t>", "dims": "std::vector<int64_t>", "shape": "std::vector<int64_t>",
        "intsN": "std::vector<int64_t>", "intsN?": "std::vector<int64_t>",
        "reduction": "at::Reduction::Reduction",
    }[a.type]


def cpp_params(op):
    return [p.replace(" **", "** ").replace(" *const *", "* const* ").replace(" *", "* ") for p in c_params(op)]


def decode_line(a):
    n, q = a.name, f'"{a.msg}"'
    if a.type == "tensor":
        return f"const NodePtr& {n}_ = node_of({n}, {q});"
    if a.type == "tensor?":
        return f"NodePtr {n}_ = optional_node({n});"
    if a.type == "tensors":
        return f"std::vector<NodePtr> {n}_ = arg::tensors({n}, {a.count}, {q});"
    if a.type == "flag":
        return f"const bool {n}_ = arg::flag({n}, {q});"
    if a.type in ("ints", "dims"):
        return f"std::vector<int64_t> {n}_ = arg::ints({n}, {a.count}, {q});"
    if a.type == "shape":
        return f"std::vector<int64_t> {n}_ = checked_shape({n}, {a.count}, {q});"
    if a.type == "intsN":
        return f"std::vector<int64_t> {n}_ = arg::ints({n}, {a.n}, {q});"
    if a.type == "intsN?":
        if re.fullmatch(r"-?\d+", a.fallback):
            return f"std::vector<int64_t> {n}_ = arg::ints_or({n}, {a.n}, {a.fallback});"
        return f"std::vector<int64_t> {n}_ = {n} ? arg::ints({n}, {a.n}, {q}) : {a.fallback}_;"
    if a.type == "reduction":
        return f"const at::Reduction::Reduction {n}_ = to_reduction({n});"
    return None  # passed through


def call_arg(a):
    if a.type in ("double", "int64", "dim"):
        return a.name
    if engine_type(a).startswith("std::vector<int64_t>"):
        return f"std::move({a.name}_)"
    return f"{a.name}_"


def op_entries(groups, ops):
    out = [f"// {STAMP}", "//",
           "// The C entries of every operator: each checks `out`, decodes its C arguments in the",
           "// order the table gives (so that a call with two bad arguments reports the one it always",
           "// did), runs the checks the table places between them, and calls the engine's op (ops/ops.h).",
           '#include "api/args.h"', '#include "api/convert.h"', '#include "api/op_entry.h"',
           '#include "api/tensor_handle.h"', '#include "ops/common.h"', '#include "ops/ops.h"', "",
           "using namespace koila;", "", 'extern "C" {', ""]
    for op in ops:
        first = f"KOILA_API koila_status* koila_{op.name}("
        out += wrap(cpp_params(op), first, len(first), 120, end=") {")
        out.append("  return op_entry(__func__, out, [&](const char* name) {")
        by_name = {a.name: a for a in op.args}
        for n in op.decode:
            for c in op.checks:
                if c.get("before") == n:
                    out.append("    " + c["code"])
            line = decode_line(by_name[n])
            if line:
                out.append("    " + line)
            for c in op.checks:
                if c.get("after") == n:
                    out.append("    " + c["code"])
        call = f"    return ops::{op.name}("
        out += wrap(["name"] + [call_arg(a) for a in op.args], call, len(call), 120, end=");")
        out += ["  });", "}", ""]
    out += ['}  // extern "C"']
    return "\n".join(out) + "\n"


def ops_h(groups, ops):
    out = [f"// {STAMP}", "//",
           "// The engine's operators: ops::<name> builds the node of one call from decoded arguments,",
           "// checks them (failing with koila::Error) and names the node `name`. Their semantics are",
           "// written by hand, group by group, in ops/<group>.cpp.",
           "#pragma once", "", "#include <cstddef>", "#include <cstdint>", "#include <vector>", "",
           '#include "graph/graph.h"', "", "namespace koila::ops {", ""]
    for g in groups:
        members = [op for op in ops if op.group == g["id"]]
        if not members:
            continue
        out.append(f"// {g['c_doc'].splitlines()[0]} (ops/{g['engine']}.cpp)")
        for op in members:
            first = f"NodePtr {op.name}("
            params = ["const char* name"] + [f"{engine_type(a)} {a.name}" for a in op.args]
            out += wrap(params, first, len(first), 120, end=");")
        out.append("")
    out += ["// The checks some C entries make before decoding what follows, so that a call with two bad",
            "// arguments reports the one it always did (the ops make them too).",
            "void check_clamp_bounds(double lo, double hi);",
            "void check_dropout(const NodePtr& x, double p);",
            "void check_permute_count(const NodePtr& x, size_t ndim);", "",
            "}  // namespace koila::ops"]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------
# The generic test and fuzz tables (tests/op_tables.h)
# ---------------------------------------------------------------------------------------

def op_tables(groups, ops):
    out = [f"// {STAMP}", "//",
           "// X-macro lists of the ops that generic tests and fuzzers take alike. Each X(...) row:",
           "//   KOILA_BINARY_OPS   X(name, reference of a and b, positive inputs)",
           "//   KOILA_SCALAR_OPS   X(name, reference of x and s)",
           "//   KOILA_UNARY_OPS    X(name, reference of x, positive inputs)",
           "//   KOILA_SMOOTH_UNARY_OPS, KOILA_FUZZ_BINARY_OPS, KOILA_FUZZ_SCALAR_OPS,",
           "//   KOILA_FUZZ_UNARY_OPS, KOILA_FUZZ_WITH_DIM_OPS   X(name)",
           "#pragma once", ""]

    def macro(name, rows):
        lines = [f"#define {name}(X)"] + [f"  X({r})" for r in rows]
        width = max(len(l) for l in lines) + 1
        return [l.ljust(width) + "\\" for l in lines[:-1]] + [lines[-1], ""]

    flag = lambda op, k: "true" if op.d.get(k) else "false"
    out += macro("KOILA_BINARY_OPS", [f"{o.name}, {o.d['reference']}, {flag(o, 'positive')}"
                                      for o in ops if o.family == "binary"])
    out += macro("KOILA_SCALAR_OPS", [f"{o.name}, {o.d['reference']}" for o in ops if o.family == "scalar"])
    out += macro("KOILA_UNARY_OPS", [f"{o.name}, {o.d['reference']}, {flag(o, 'positive')}"
                                     for o in ops if o.family == "unary"])
    out += macro("KOILA_SMOOTH_UNARY_OPS", [o.name for o in ops if o.family == "unary" and o.d.get("smooth")])
    for kind in ("binary", "scalar", "unary", "with_dim"):
        out += macro(f"KOILA_FUZZ_{kind.upper()}_OPS", [o.name for o in ops if o.d.get("fuzz") == kind])
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# Rust (bindings/rust/koila/src/ops_table.rs)
# ---------------------------------------------------------------------------------------

def rust_doc(text, indent):
    return wrap(text.split(), indent + "/// ", indent + "/// ", 100, sep=" ")


def rust(groups, ops):
    out = [f"//! {STAMP}", "//!",
           "//! The operators' methods on [`Tensor`]; the types and helpers they use are in ops.rs.",
           "use crate::error::Result;", "use crate::ops::{list, opt_array, Reduction};",
           "use crate::tensor::{make, maybe_ptr, or_null, Tensor};", "use koila_sys as sys;", "",
           "impl Tensor {"]
    first = True
    for op in ops:
        params, call, pre = [], ["out"], []
        for i, a in enumerate(op.args):
            b = op.bound(a)
            if i == 0 and not op.static:
                call.append("self.as_ptr()")
                continue
            if a.type == "tensor":
                params.append(f"{b}: &Tensor"); call.append(f"{b}.as_ptr()")
            elif a.type == "tensor?":
                params.append(f"{b}: Option<&Tensor>"); call.append(f"maybe_ptr({b})")
            elif a.type == "tensors":
                params.append(f"{b}: &[&Tensor]")
                pre.append(f"let ptrs = list({b}, \"{op.name}\")?;")
                call += ["ptrs.as_ptr()", "ptrs.len()"]
            elif a.type == "double":
                params.append(f"{b}: f64"); call.append(b)
            elif a.type in ("int64", "dim"):
                params.append(f"{b}: i64"); call.append(b)
            elif a.type == "flag":
                params.append(f"{b}: bool"); call.append(f"{b} as i32")
            elif a.type in ("ints", "shape"):
                params.append(f"{b}: &[i64]"); call += [f"{b}.as_ptr()", f"{b}.len()"]
            elif a.type == "dims":
                params.append(f"{b}: &[i64]"); call += [f"or_null({b})", f"{b}.len()"]
            elif a.type == "intsN":
                params.append(f"{b}: [i64; {a.n}]"); call.append(f"{b}.as_ptr()")
            elif a.type == "intsN?":
                if a.n == 1:
                    params.append(f"{b}: Option<i64>")
                    pre.append(f"let {b} = {b}.map(|v| [v]);")
                else:
                    params.append(f"{b}: Option<[i64; {a.n}]>")
                call.append(f"opt_array(&{b})")
            elif a.type == "reduction":
                params.append(f"{b}: Reduction"); call.append(f"{b}.raw()")
        if not first:
            out.append("")
        first = False
        out += rust_doc(op.d["doc"], "    ")
        receiver = [] if op.static else ["&self"]
        if len(receiver) + len(params) > 7:
            out.append("    #[allow(clippy::too_many_arguments)]")
        name = op.d.get("rust", op.name)
        out += wrap(receiver + params, f"    pub fn {name}(", 8, 100, end=") -> Result<Tensor> {")
        out += ["        " + p for p in pre]
        body = f"make(|out| unsafe {{ sys::koila_{op.name}({', '.join(call)}) }})"
        if len(body) + 8 <= 100:
            out.append("        " + body)
        else:
            out.append("        make(|out| unsafe {")
            out += wrap(call, f"            sys::koila_{op.name}(", 16, 100, end=")")
            out.append("        })")
        out.append("    }")
    out.append("}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------
# Java (the generated part of bindings/java/src/main/java/org/koila/Tensor.java)
# ---------------------------------------------------------------------------------------

J_BEGIN = "  // Generated from src/ops/ops.toml by scripts/gen_ops.py: edit the table, not this part."
J_END = "  // End of the generated operators."


def java_doc(text):
    parts = text.split("`")
    for i, part in enumerate(parts):
        if i % 2:
            parts[i] = "{@code " + part + "}"
        else:
            parts[i] = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = "".join(parts)
    one = f"  /** {text} */"
    if len(one) <= 120:
        return [one]
    return ["  /**"] + ["   * " + line for line in wrap(text.split(), "", 0, 113, sep=" ")] + ["   */"]


def java(groups, ops):
    out = [J_BEGIN, ""]
    for op in ops:
        params, call, pre, keep = [], ["out"], [], []
        if not op.static:
            keep.append("this")
        for i, a in enumerate(op.args):
            b = camel(op.bound(a))
            if i == 0 and not op.static:
                call.append("address()")
                continue
            last = i == len(op.args) - 1
            if a.type == "tensor":
                params.append(f"Tensor {b}"); call.append(f'required({b}, "{b}")'); keep.append(b)
            elif a.type == "tensor?":
                params.append(f"Tensor {b}"); call.append(f'addressOf({b}, "{b}")'); keep.append(b)
            elif a.type == "tensors":
                params.append(f"Tensor[] {b}")
                pre.append(f'long[] handles = addresses({b}, "{b}");')
                call.append("handles"); keep.append(f"(Object) {b}")
            elif a.type == "double":
                params.append(f"double {b}"); call.append(b)
            elif a.type in ("int64", "dim"):
                params.append(f"long {b}"); call.append(b)
            elif a.type == "flag":
                params.append(f"boolean {b}"); call.append(f"{b} ? 1 : 0")
            elif a.type in ("ints", "shape"):
                params.append(("long... " if last else "long[] ") + b)
                pre.append(f'long[] {b}Arg = longsArg({b}, "{b}");'); call.append(f"{b}Arg")
            elif a.type == "dims":
                params.append(f"long[] {b}"); call.append(b)
            elif a.type == "intsN":
                params.append(("long... " if last else "long[] ") + b)
                pre.append(f'long[] {b}Arg = sizesArg(longsArg({b}, "{b}"), {a.n}, "{b}");'); call.append(f"{b}Arg")
            elif a.type == "intsN?":
                params.append(f"long[] {b}")
                pre.append(f'long[] {b}Arg = sizesArg({b}, {a.n}, "{b}");'); call.append(f"{b}Arg")
            elif a.type == "reduction":
                params.append(f"Reduction {b}")
                pre.append(f'if ({b} == null) throw KoilaException.invalid("argument \'{b}\' is null");')
                call.append(f"{b}.value()")
        out += java_doc(op.d["doc"])
        name = op.d.get("java", camel(op.name))
        static = "static " if op.static else ""
        first = f"  public {static}Tensor {name}("
        out += wrap(params, first, 6, 120, end=") {")
        out += ["    " + p for p in pre]
        first = f"    return produce(out -> KoilaNative.koila_{op.name}("
        out += wrap(call, first, 8, 120, end=f"), {', '.join(keep)});")
        out += ["  }", ""]
    out.append(J_END)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------
# Julia (bindings/julia/Koila.jl/src/ops_table.jl)
# ---------------------------------------------------------------------------------------

def julia(groups, ops):
    out = [f"# {STAMP}", "#",
           "# The operators whose Julia method follows from their C arguments: a Tensor, `nothing` for",
           "# an optional tensor, numbers, 1-based dims. The others, and the operator syntax (a + b,",
           "# max.(a, b), ...), are written by hand in ops.jl.", ""]
    exports = []
    for op in ops:
        jl = op.d.get("julia", op.name)
        if jl is False:
            continue
        defaults = op.d.get("julia_defaults", {})
        params, call = [], [f"LibKoila.koila_{op.name}"]
        for a in op.args:
            b = op.bound(a)
            dflt = f" = {defaults[a.name]}" if a.name in defaults else ""
            if a.type == "tensor":
                params.append(f"{b}::Tensor"); call.append(b)
            elif a.type == "tensor?":
                params.append(f"{b}::Union{{Tensor,Nothing}} = nothing"); call.append(f"_opt({b})")
            elif a.type == "double":
                params.append(f"{b}::Real{dflt}"); call.append(b)
            elif a.type == "int64":
                params.append(f"{b}::Integer{dflt}"); call.append(b)
            elif a.type == "dim":
                params.append(f"{b}::Integer{dflt}"); call.append(f"_cdim({b})")
            elif a.type == "flag":
                params.append(f"{b}::Bool{dflt}"); call.append(b)
            else:
                raise TableError(f"{op.name}: a {a.type} argument has no generated Julia form (julia = false)")
        shown = ", ".join(op.bound(a) + (f" = {defaults[a.name]}" if a.name in defaults else "")
                          + (" = nothing" if a.type == "tensor?" else "") for a in op.args)
        doc = op.d["doc"] + (" Dims are 1-based (-1: the last)." if any(a.type == "dim" for a in op.args) else "")
        out += ['"""', f"    {jl.split('.')[-1]}({shown})", ""] + wrap(doc.split(), "", 0, 92, sep=" ") + ['"""']
        one = f"{jl}({', '.join(params)}) = _new({', '.join(call)})"
        if len(one) <= 100:
            out.append(one)
        else:
            out += wrap(params, f"{jl}(", len(jl) + 1, 100, end=") =")
            out += wrap(call, "    _new(", 9, 100, end=")")
        out.append("")
        if op.d.get("julia_export"):
            if "." in jl:
                raise TableError(f"{op.name}: a Base method is not exported")
            exports.append(jl)
    out += wrap(exports, "export ", 7, 100)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------

def outputs(root, table_path=None):
    groups, ops = load(root, table_path)
    whole = {
        "src/api/op_entries.cpp": op_entries(groups, ops),
        "src/ops/ops.h": ops_h(groups, ops),
        "tests/op_tables.h": op_tables(groups, ops),
        "bindings/rust/koila/src/ops_table.rs": rust(groups, ops),
        "bindings/julia/Koila.jl/src/ops_table.jl": julia(groups, ops),
    }
    regions = {
        "include/koila.h": (H_BEGIN, H_END, koila_h_region(groups, ops)),
        "bindings/java/src/main/java/org/koila/Tensor.java": (J_BEGIN, J_END, java(groups, ops)),
    }
    result = dict(whole)
    for path, (begin, end, body) in regions.items():
        text = (root / path).read_text()
        result[path] = replace_region(text, begin, end, body, path)
    return result


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when a generated file is stale")
    p.add_argument("--root", type=pathlib.Path, default=ROOT, help="the repository (default: this script's)")
    p.add_argument("--table", type=pathlib.Path, help=f"read this table instead of {TABLE} (with --check)")
    args = p.parse_args(argv)
    if args.table and not args.check:
        p.error("--table writes nothing: use it with --check")
    try:
        files = outputs(args.root, args.table)
    except (TableError, tomllib.TOMLDecodeError, KeyError, OSError) as e:
        print(f"gen_ops: {args.table or TABLE}: {e}", file=sys.stderr)
        return 2
    stale = [path for path, text in files.items()
             if not (args.root / path).exists() or (args.root / path).read_text() != text]
    if args.check:
        if stale:
            print("stale (run python3 scripts/gen_ops.py): " + ", ".join(stale), file=sys.stderr)
            return 1
        print(f"{len(files)} generated files match {TABLE}")
        return 0
    for path in stale:
        (args.root / path).write_text(files[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
