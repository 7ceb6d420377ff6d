#!/usr/bin/env python3
"""Generates src/LibKoila.jl, the raw Julia binding of koila, from include/koila.h.

    python3 bindings/julia/Koila.jl/gen/generate.py            # (re)write src/LibKoila.jl
    python3 bindings/julia/Koila.jl/gen/generate.py --check    # exit 1 if it is stale

Options: --header FILE (default: include/koila.h of this repository), --output FILE
(default: src/LibKoila.jl of this package).

The parser is deliberately strict: it understands exactly the C that koila.h is written in
(opaque struct typedefs, enums with values, integer #define constants, named function
pointer typedefs (callbacks), KOILA_API function declarations over a fixed set of types) and stops with an error naming the line of anything
else, so that a change to the header can never silently drop or mistype a function.

--check regenerates in memory and compares with the committed file; independently of the
parser it also scans the header with a crude regular expression for every KOILA_API
function name and verifies that the generated file binds each one with a ccall (and
nothing else), reporting missing and extra names.

Standard library only (Python 3.8+).
"""

import argparse
import hashlib
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)
REPO = os.path.normpath(os.path.join(PACKAGE, "..", "..", ".."))
DEFAULT_HEADER = os.path.join(REPO, "include", "koila.h")
DEFAULT_OUTPUT = os.path.join(PACKAGE, "src", "LibKoila.jl")


class ParseError(Exception):
    pass


# ------------------------------------------------------------------------------------------
# Lexing: comments out, line structure kept
# ------------------------------------------------------------------------------------------

def strip_comments(text):
    """Returns (code, comments): code is text with every comment replaced by spaces (newlines
    kept, so line numbers stay valid); comments is a list of (first_line, last_line, body)."""
    out = []
    comments = []
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise ParseError("line %d: unterminated comment" % line)
            body = text[i + 2:j]
            first = line
            line += body.count("\n")
            comments.append((first, line, body))
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j + 2]))
            i = j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            comments.append((line, line, text[i + 2:j]))
            out.append(" " * (j - i))
            i = j
        elif c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                if text[j] == "\\":
                    j += 1
                if j < n and text[j] == "\n":
                    raise ParseError("line %d: newline in a literal" % line)
                j += 1
            if j >= n:
                raise ParseError("line %d: unterminated literal" % line)
            out.append(text[i:j + 1])
            i = j + 1
        else:
            if c == "\n":
                line += 1
            out.append(c)
            i += 1
    return "".join(out), comments


# ------------------------------------------------------------------------------------------
# Preprocessor: only what koila.h uses
# ------------------------------------------------------------------------------------------

ALLOWED_INCLUDES = {"<stddef.h>", "<stdint.h>"}
# Conditionals whose content is platform plumbing, skipped after checking that it holds only
# the lines below.
PLATFORM_CONDITIONS = {"defined(_WIN32)", "__cplusplus"}
PLATFORM_LINE = re.compile(
    r'(#\s*(if|ifdef|ifndef|elif|else|endif)\b.*'
    r'|#\s*define\s+KOILA_API\b.*'
    r'|extern\s+"C"\s*\{'
    r'|\})$')
INT_MACROS = {
    "INT64_MIN": "typemin(Int64)",
    "INT64_MAX": "typemax(Int64)",
    "UINT64_MAX": "typemax(UInt64)",
    "INT32_MIN": "typemin(Int32)",
    "INT32_MAX": "typemax(Int32)",
    "SIZE_MAX": "typemax(Csize_t)",
}


def preprocess(code):
    """Returns (lines, defines): lines is a list of (line_number, text) of the C code that is
    compiled on every platform in C; defines is a list of (line, name, julia_value)."""
    raw = code.split("\n")
    # Join continuation lines, keeping the first line's number.
    logical = []
    k = 0
    while k < len(raw):
        number, text = k + 1, raw[k]
        while text.endswith("\\") and k + 1 < len(raw):
            k += 1
            text = text[:-1] + " " + raw[k]
        logical.append((number, text))
        k += 1

    lines, defines = [], []
    stack = []  # each: "guard", "platform"
    guard = None
    for number, text in logical:
        s = text.strip()
        skipping = "platform" in stack
        if skipping:
            if not PLATFORM_LINE.match(s) and s:
                raise ParseError("line %d: unexpected line inside a platform conditional: %s" % (number, s))
        if not s.startswith("#"):
            if not skipping:
                lines.append((number, text))
            continue
        m = re.match(r"#\s*(\w+)\s*(.*)$", s)
        if not m:
            raise ParseError("line %d: malformed directive: %s" % (number, s))
        directive, rest = m.group(1), m.group(2).strip()
        if directive in ("if", "ifdef", "ifndef"):
            if skipping:
                stack.append("platform")
            elif directive == "ifndef" and guard is None and not stack and re.fullmatch(r"\w+_H", rest):
                guard = rest
                stack.append("guard")
            elif rest in PLATFORM_CONDITIONS:
                stack.append("platform")
            else:
                raise ParseError("line %d: unsupported conditional: %s" % (number, s))
        elif directive in ("elif", "else"):
            if not stack or stack[-1] != "platform":
                raise ParseError("line %d: #%s outside a platform conditional" % (number, directive))
        elif directive == "endif":
            if not stack:
                raise ParseError("line %d: unbalanced #endif" % number)
            stack.pop()
        elif skipping:
            pass  # checked by PLATFORM_LINE above
        elif directive == "include":
            if rest not in ALLOWED_INCLUDES:
                raise ParseError("line %d: unexpected include %s" % (number, rest))
        elif directive == "define":
            dm = re.fullmatch(r"(\w+)(\s+(.*))?", rest)
            if not dm:
                raise ParseError("line %d: unsupported #define: %s" % (number, s))
            name, value = dm.group(1), (dm.group(3) or "").strip()
            if name == guard and value == "" or name == "KOILA_API":
                continue   # the include guard; the export attribute
            if not re.fullmatch(r"KOILA_[A-Z0-9_]+", name):
                raise ParseError("line %d: unexpected macro %s" % (number, name))
            defines.append((number, name, define_value(number, name, value)))
        else:
            raise ParseError("line %d: unsupported directive: %s" % (number, s))
    if stack:
        raise ParseError("unterminated conditional at end of header")
    if guard is None:
        raise ParseError("no include guard found")
    return lines, defines


def define_value(number, name, value):
    v = value.strip()
    while v.startswith("(") and v.endswith(")"):
        v = v[1:-1].strip()
    if re.fullmatch(r"-?(0|[1-9][0-9]*)", v):
        return v
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", v):
        return "0x%x" % int(v, 16)
    if v in INT_MACROS:
        return INT_MACROS[v]
    raise ParseError("line %d: cannot translate #define %s %s" % (number, name, value))


# ------------------------------------------------------------------------------------------
# Declarations
# ------------------------------------------------------------------------------------------

SCALARS = {
    "int": "Cint",
    "double": "Cdouble",
    "size_t": "Csize_t",
    "int64_t": "Int64",
    "uint64_t": "UInt64",
    "int32_t": "Int32",
    "uint32_t": "UInt32",
    "uint8_t": "UInt8",
    "char": "Cchar",
    "float": "Cfloat",
}
C_WORDS = {"const", "void", "struct", "enum", "unsigned", "signed", "long", "short",
           "volatile", "restrict", "static", "extern", "inline", "typedef"}
JULIA_RESERVED = {
    "baremodule", "begin", "break", "catch", "const", "continue", "do", "else", "elseif",
    "end", "export", "false", "finally", "for", "function", "global", "if", "import", "let",
    "local", "macro", "module", "quote", "return", "struct", "true", "try", "using", "while",
    "abstract", "primitive", "mutable", "type", "where", "in", "isa", "outer", "new",
    "ccall", "Ptr", "Cvoid", "Cstring", "C_NULL", "fptr", "nothing", "missing",
}


class Header:
    def __init__(self):
        self.opaque = []      # names
        self.enums = []       # (name, [(item, value)], line)
        self.defines = []     # (line, name, julia value)
        self.callbacks = []   # (name, C declaration, doc, line): function pointer typedefs
        self.functions = []   # dicts: name, ret, params [(jtype, cname, jname)], proto, doc, line


def parse_header(text):
    code, comments = strip_comments(text)
    lines, defines = preprocess(code)
    h = Header()
    h.defines = defines

    # Statements end at ';' (no declaration in koila.h has a ';' inside braces).
    statements = []
    buf, start = [], None
    for number, line in lines:
        pos = 0
        while True:
            j = line.find(";", pos)
            piece = line[pos:] if j < 0 else line[pos:j]
            if piece.strip() and start is None:
                start = number
            buf.append(piece)
            if j < 0:
                break
            stmt = " ".join(" ".join(buf).split())
            if not stmt:
                raise ParseError("line %d: empty statement" % number)
            statements.append((start, number, stmt))
            buf, start = [], None
            pos = j + 1
    leftover = " ".join(" ".join(buf).split())
    if leftover:
        raise ParseError("line %s: text after the last declaration: %s" % (start, leftover))

    # Comments that end on the line just above a declaration document it.
    comment_end = {}
    for first, last, body in comments:
        comment_end[last] = (first, body)

    def doc_for(line):
        parts = []
        while line - 1 in comment_end:
            first, body = comment_end[line - 1]
            parts.insert(0, body)
            line = first
        return clean_comment("\n".join(parts))

    typedefs = set()
    for first, last, stmt in statements:
        m = re.fullmatch(r"typedef struct (\w+) (\w+)", stmt)
        if m:
            if m.group(1) != m.group(2):
                raise ParseError("line %d: typedef struct %s %s: names differ" % (first, m.group(1), m.group(2)))
            h.opaque.append(m.group(1))
            typedefs.add(m.group(1))
            continue
        m = re.fullmatch(r"typedef enum (\w+) ?\{(.*)\} ?(\w+)", stmt)
        if m:
            if m.group(1) != m.group(3):
                raise ParseError("line %d: typedef enum %s %s: names differ" % (first, m.group(1), m.group(3)))
            h.enums.append((m.group(1), parse_enum_body(first, m.group(2)), first))
            typedefs.add(m.group(1))
            continue
        m = re.fullmatch(r"typedef ([^()]*?) ?\( ?\* ?(koila_\w+) ?\) ?\((.*)\)", stmt)
        if m:
            parse_callback(first, m.group(1), m.group(2), m.group(3), h)
            h.callbacks.append((m.group(2), " ".join(stmt.split()) + ";", doc_for(first), first))
            typedefs.add(m.group(2))
            continue
        if stmt.startswith("KOILA_API "):
            h.functions.append(parse_function(first, stmt, h, doc_for(first)))
            continue
        raise ParseError("line %d: declaration not understood: %s" % (first, stmt))

    seen = {}
    for f in h.functions:
        if f["name"] in seen:
            raise ParseError("line %d: %s declared twice (first at line %d)"
                             % (f["line"], f["name"], seen[f["name"]]))
        seen[f["name"]] = f["line"]
    if not h.functions:
        raise ParseError("no KOILA_API function found")
    return h


def clean_comment(body):
    out = []
    for line in body.split("\n"):
        s = line.strip()
        if s.startswith("*") and not s.startswith("*/"):
            s = s[1:].strip()
        if re.fullmatch(r"-+", s):
            continue
        out.append(s)
    text = " ".join(x for x in out if x)
    return " ".join(text.split())


def parse_enum_body(line, body):
    items = []
    value = -1
    parts = [p.strip() for p in body.split(",")]
    if parts and parts[-1] == "":
        parts.pop()
    if not parts:
        raise ParseError("line %d: empty enum" % line)
    for p in parts:
        m = re.fullmatch(r"([A-Z][A-Z0-9_]*)(?: ?= ?(-?(?:0|[1-9][0-9]*)))?", p)
        if not m:
            raise ParseError("line %d: enum item not understood: %s" % (line, p))
        value = int(m.group(2)) if m.group(2) is not None else value + 1
        if not (-2 ** 31 <= value < 2 ** 31):
            raise ParseError("line %d: enum value %d does not fit an int" % (line, value))
        items.append((m.group(1), value))
    seen = set()
    for name, v in items:
        if v in seen:
            raise ParseError("line %d: duplicate enum value %d" % (line, v))
        seen.add(v)
    return items


def parse_type(line, tokens, h, context, is_return):
    """tokens: the C type's tokens. Returns the Julia type."""
    enums = {e[0] for e in h.enums}
    opaque = set(h.opaque)
    callbacks = {c[0] for c in h.callbacks}
    base, base_const, stars = None, False, 0
    for tok in tokens:
        if tok == "const":
            if stars == 0:
                base_const = True
            continue  # a const pointer (T *const) is passed like T *
        if tok == "*":
            if base is None:
                raise ParseError("line %d: %s: '*' before the type" % (line, context))
            stars += 1
            continue
        if stars:
            raise ParseError("line %d: %s: unexpected '%s' after '*'" % (line, context, tok))
        if base is not None:
            raise ParseError("line %d: %s: two type names (%s %s)" % (line, context, base, tok))
        if tok in SCALARS or tok == "void" or tok in enums or tok in opaque or tok in callbacks:
            base = tok
        else:
            raise ParseError("line %d: %s: unknown type '%s'" % (line, context, tok))
    if base is None:
        raise ParseError("line %d: %s: no type" % (line, context))

    def pointee(depth):
        if depth == 0:
            if base == "void":
                return "Cvoid"
            if base == "char":
                return "UInt8"
            if base in SCALARS:
                return SCALARS[base]
            return base  # enum or opaque
        return "Ptr{%s}" % pointee(depth - 1)

    if stars == 0:
        if base == "void":
            if not is_return:
                raise ParseError("line %d: %s: void parameter" % (line, context))
            return "Cvoid"
        if base in opaque:
            raise ParseError("line %d: %s: opaque struct %s by value" % (line, context, base))
        return SCALARS.get(base, base)
    if base in callbacks:
        raise ParseError("line %d: %s: pointer to the function pointer type %s" % (line, context, base))
    if stars == 1 and base == "char" and base_const:
        return "Cstring"
    return "Ptr{%s}" % pointee(stars - 1)


TOKEN = re.compile(r"[A-Za-z_]\w*|\*|\S")


def parse_callback(line, ret_c, name, params_c, h):
    """Checks a function pointer typedef: named parameters of the known types, as for a
    function (the Julia side passes a @cfunction, a Ptr{Cvoid})."""
    context = "callback type " + name
    if "(" in params_c or ")" in params_c or "[" in params_c or "..." in params_c:
        raise ParseError("line %d: %s: parameters not understood: %s" % (line, context, params_c))
    parse_type(line, TOKEN.findall(ret_c), h, context + " return type", True)
    if params_c == "void":
        return
    for k, p in enumerate(params_c.split(",")):
        toks = TOKEN.findall(p.strip())
        if len(toks) < 2 or not re.fullmatch(r"[A-Za-z_]\w*", toks[-1]) or toks[-1] in C_WORDS \
                or toks[-1] in SCALARS:
            raise ParseError("line %d: %s: parameter %d not understood (unnamed?): %s"
                             % (line, context, k + 1, p.strip()))
        parse_type(line, toks[:-1], h, "%s parameter '%s'" % (context, toks[-1]), False)


def parse_function(line, stmt, h, doc):
    m = re.fullmatch(r"KOILA_API ([^()]*?) ?\b(koila_\w+) ?\((.*)\)", stmt)
    if not m:
        raise ParseError("line %d: function declaration not understood: %s" % (line, stmt))
    ret_c, name, params_c = m.group(1), m.group(2), m.group(3).strip()
    if "(" in params_c or ")" in params_c or "[" in params_c or "..." in params_c:
        raise ParseError("line %d: %s: parameters not understood (function pointer, array or varargs): %s"
                         % (line, name, params_c))
    ret_tokens = TOKEN.findall(ret_c)
    for t in ret_tokens:
        if not (t in ("const", "*") or re.fullmatch(r"[A-Za-z_]\w*", t)):
            raise ParseError("line %d: %s: return type not understood: %s" % (line, name, ret_c))
    ret = parse_type(line, ret_tokens, h, name + " return type", True)

    params = []
    if params_c in ("void", ""):
        if params_c == "":
            raise ParseError("line %d: %s: write (void) for no parameters" % (line, name))
    else:
        for k, p in enumerate(params_c.split(",")):
            toks = TOKEN.findall(p.strip())
            if len(toks) < 2 or not re.fullmatch(r"[A-Za-z_]\w*", toks[-1]) or toks[-1] in C_WORDS \
                    or toks[-1] in SCALARS or toks[-2] not in ("*",) and not re.fullmatch(r"[A-Za-z_]\w*", toks[-2]):
                raise ParseError("line %d: %s: parameter %d not understood (unnamed?): %s"
                                 % (line, name, k + 1, p.strip()))
            cname = toks[-1]
            jtype = parse_type(line, toks[:-1], h, "%s parameter '%s'" % (name, cname), False)
            params.append([jtype, cname, None])
        cnames = [p[1] for p in params]
        if len(set(cnames)) != len(cnames):
            raise ParseError("line %d: %s: two parameters with the same name" % (line, name))
    return {"name": name, "ret": ret, "params": params, "line": line, "doc": doc,
            "proto": " ".join(stmt[len("KOILA_API "):].split()) + ";"}


# ------------------------------------------------------------------------------------------
# Julia output
# ------------------------------------------------------------------------------------------

def julia_names(h):
    """Gives every parameter a Julia name that is neither reserved nor a type used here."""
    taken = set(JULIA_RESERVED) | set(h.opaque) | {e[0] for e in h.enums} | set(SCALARS.values())
    taken |= {c[0] for c in h.callbacks}
    taken |= {item for e in h.enums for item, _ in e[1]} | {d[1] for d in h.defines}
    taken |= {"Int64", "UInt64", "Int32", "UInt32", "UInt8", "Cint", "Cdouble", "Csize_t"}
    for f in h.functions:
        taken.add(f["name"])
    for f in h.functions:
        for p in f["params"]:
            j = p[1]
            while j in taken:
                j = j + "_"
            p[2] = j


def julia_doc(text):
    return text.replace("\\", "\\\\").replace("$", "\\$").replace('"""', '\\"\\"\\"')


PRELUDE = r'''
const Libdl = Base.Libc.Libdl

"""
    libkoila_path() -> String

Where the koila shared library is taken from, in order: the environment variable
`KOILA_LIB` (the full path of the library file), `KOILA_LIB_DIR` (the directory that holds
`libkoila.so` / `libkoila.dylib` / `koila.dll`), else `Libdl.find_library` on the system
search path (`LD_LIBRARY_PATH`, `DYLD_LIBRARY_PATH`, `PATH`, the loader's cache).
"""
function libkoila_path()
    lib = get(ENV, "KOILA_LIB", "")
    if !isempty(lib)
        isfile(lib) || error("Koila: KOILA_LIB is set to \"$lib\", which is not a file")
        return lib
    end
    dir = get(ENV, "KOILA_LIB_DIR", "")
    if !isempty(dir)
        isdir(dir) || error("Koila: KOILA_LIB_DIR is set to \"$dir\", which is not a directory")
        for name in ("libkoila." * Libdl.dlext, "koila." * Libdl.dlext,
                     "libkoila." * Libdl.dlext * "." * string(KOILA_VERSION_MAJOR))
            path = joinpath(dir, name)
            isfile(path) && return path
        end
        error("Koila: KOILA_LIB_DIR is set to \"$dir\", but it holds no libkoila." * Libdl.dlext)
    end
    lib = Libdl.find_library(["libkoila", "koila"])
    isempty(lib) && error("Koila: cannot find the koila shared library. Set KOILA_LIB to the " *
                          "full path of libkoila." * Libdl.dlext * " (or KOILA_LIB_DIR to its " *
                          "directory), or put its directory on the system library search path.")
    return lib
end

const libkoila_handle = Ref{Ptr{Cvoid}}(C_NULL)
const libkoila_loaded_from = Ref{String}("")

@noinline function _not_loaded(name::Symbol)
    error("Koila: $name called before the koila library was loaded (see the error that " *
          "`using Koila` reported)")
end

"""
    load_libkoila(path = libkoila_path())

Opens the koila shared library and resolves every function of koila.h in it. Runs when the
module is loaded; fails with an error naming the path and every missing function.
"""
function load_libkoila(path::AbstractString = libkoila_path())
    handle = try
        Libdl.dlopen(path)
    catch err
        error("Koila: cannot load the koila library \"$path\": " * sprint(showerror, err))
    end
    pointers = Vector{Ptr{Cvoid}}(undef, length(_FUNCTIONS))
    missing_names = Symbol[]
    for (k, (name, _)) in enumerate(_FUNCTIONS)
        p = Libdl.dlsym_e(handle, name)
        p == C_NULL && push!(missing_names, name)
        pointers[k] = p
    end
    isempty(missing_names) ||
        error("Koila: the library \"$path\" lacks $(length(missing_names)) function(s) of koila.h " *
              "(is it older than the header?): " * join(string.(missing_names), ", "))
    for (k, (_, ref)) in enumerate(_FUNCTIONS)
        ref[] = pointers[k]
    end
    libkoila_handle[] = handle
    libkoila_loaded_from[] = String(path)
    version = unsafe_string(koila_version())
    major = tryparse(Int, first(split(version, '.')))
    if major != KOILA_VERSION_MAJOR
        error("Koila: the library \"$path\" is version $version, but this binding was generated " *
              "from koila.h $(KOILA_VERSION_MAJOR).$(KOILA_VERSION_MINOR).$(KOILA_VERSION_PATCH)")
    end
    return path
end

function __init__()
    load_libkoila()
end
'''


def generate(header_text, header_label):
    h = parse_header(header_text)
    julia_names(h)
    digest = hashlib.sha256(header_text.encode("utf-8")).hexdigest()
    o = []
    w = o.append
    w("# GENERATED FILE - DO NOT EDIT.")
    w("#")
    w("# The raw Julia binding of koila: one function per function of the C API, written by")
    w("# bindings/julia/Koila.jl/gen/generate.py from %s." % header_label)
    w("# Header sha256: %s" % digest)
    w("#")
    w("# To regenerate after changing the header, from the repository root:")
    w("#     python3 bindings/julia/Koila.jl/gen/generate.py")
    w("# and check that it is current with:")
    w("#     python3 bindings/julia/Koila.jl/gen/generate.py --check")
    w("#")
    w("# Calls go through function pointers resolved from the library when the module loads")
    w("# (see load_libkoila), so the library's location may be chosen at run time. These")
    w("# functions do no checking of their own: they are the C API, with its pointers. Use the")
    w("# Koila module for the safe interface.")
    w("module LibKoila")
    w(PRELUDE.rstrip("\n"))
    w("")
    w("# " + "-" * 88)
    w("# Constants (#define)")
    w("# " + "-" * 88)
    w("")
    for _, name, value in h.defines:
        w("const %s = %s" % (name, value))
    w("")
    w("# " + "-" * 88)
    w("# Opaque handles: only ever seen through pointers")
    w("# " + "-" * 88)
    w("")
    for name in h.opaque:
        w("mutable struct %s end" % name)
    w("")
    w("# " + "-" * 88)
    w("# Enums: C enums are int-sized, hence Cint")
    w("# " + "-" * 88)
    for name, items, _ in h.enums:
        w("")
        w("@enum %s::Cint begin" % name)
        for item, value in items:
            w("    %s = %d" % (item, value))
        w("end")
    if h.callbacks:
        w("")
        w("# " + "-" * 88)
        w("# Callbacks: C function pointers, passed as a @cfunction (a Ptr{Cvoid}) or C_NULL")
        w("# " + "-" * 88)
        for name, decl, doc, _ in h.callbacks:
            w("")
            w('"""')
            w("    %s" % name)
            w("")
            w("C: `%s`" % julia_doc(decl))
            if doc:
                w("")
                w(julia_doc(doc))
            w('"""')
            w("const %s = Ptr{Cvoid}" % name)
    w("")
    w("# " + "-" * 88)
    w("# Functions")
    w("# " + "-" * 88)
    w("")
    for f in h.functions:
        w("const _fptr_%s = Ref{Ptr{Cvoid}}(C_NULL)" % f["name"])
    w("")
    w("# Every function of koila.h, with the slot its address is stored in by load_libkoila.")
    w("const _FUNCTIONS = (")
    for f in h.functions:
        w("    (:%s, _fptr_%s)," % (f["name"], f["name"]))
    w(")")
    for f in h.functions:
        args = ", ".join(p[2] for p in f["params"])
        types = ", ".join(p[0] for p in f["params"])
        if len(f["params"]) == 1:
            types += ","
        w("")
        w('"""')
        w("    %s(%s) -> %s" % (f["name"], args, f["ret"]))
        w("")
        w("C: `%s`" % julia_doc(f["proto"]))
        if f["doc"]:
            w("")
            w(julia_doc(f["doc"]))
        w('"""')
        w("function %s(%s)" % (f["name"], args))
        w("    fptr = _fptr_%s[]" % f["name"])
        w("    fptr == C_NULL && _not_loaded(:%s)" % f["name"])
        call = "    ccall(fptr, %s, (%s)" % (f["ret"], types)
        if args:
            call += ", " + args
        w(call + ")")
        w("end")
    w("")
    w("export " + ", ".join(["libkoila_path", "load_libkoila"]))
    w("")
    w("end # module LibKoila")
    return "\n".join(o) + "\n", h


# ------------------------------------------------------------------------------------------
# --check: an independent scan
# ------------------------------------------------------------------------------------------

def crude_header_names(text):
    """Every name declared after KOILA_API and before '(' - a regex, not the parser."""
    no_comments = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    no_comments = re.sub(r"//[^\n]*", " ", no_comments)
    no_comments = re.sub(r"(?m)^\s*#.*$", " ", no_comments)
    return set(re.findall(r"\bKOILA_API\b[^;(#]*?\b(\w+)\s*\(", no_comments))


def ccall_bound_names(jl):
    """Names of the generated functions whose body calls, through ccall, the pointer slot of
    the same name, and that load_libkoila resolves by that name."""
    bound = set()
    for m in re.finditer(r"^function (\w+)\((.*?)\)\n(.*?)^end$", jl, flags=re.M | re.S):
        name, body = m.group(1), m.group(3)
        if re.search(r"fptr = _fptr_%s\[\]\n" % re.escape(name), body) and "ccall(fptr, " in body:
            bound.add(name)
    resolved = set(re.findall(r"^    \(:(\w+), _fptr_(\w+)\),$", jl, flags=re.M))
    return {n for n in bound if (n, n) in resolved}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--header", default=DEFAULT_HEADER)
    ap.add_argument("--output", default=DEFAULT_OUTPUT)
    ap.add_argument("--check", action="store_true",
                    help="do not write; exit 1 when the output is stale or does not bind every function")
    args = ap.parse_args(argv)

    with open(args.header, encoding="utf-8") as fh:
        header_text = fh.read()
    header_path = os.path.abspath(args.header)
    if os.path.normpath(header_path).startswith(REPO + os.sep):
        label = os.path.relpath(header_path, REPO).replace(os.sep, "/")
    else:
        label = os.path.basename(header_path)
    try:
        text, h = generate(header_text, label)
    except ParseError as e:
        print("generate.py: %s: %s" % (args.header, e), file=sys.stderr)
        return 2

    if not args.check:
        with open(args.output, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        print("wrote %s: %d functions, %d enums, %d opaque types, %d constants"
              % (args.output, len(h.functions), len(h.enums), len(h.opaque), len(h.defines)))
        return 0

    ok = True
    try:
        with open(args.output, encoding="utf-8") as fh:
            current = fh.read()
    except OSError as e:
        print("generate.py --check: cannot read %s: %s" % (args.output, e), file=sys.stderr)
        return 1
    if current != text:
        ok = False
        old, new = current.split("\n"), text.split("\n")
        first = next((k for k in range(min(len(old), len(new))) if old[k] != new[k]), min(len(old), len(new)))
        print("generate.py --check: %s is stale (first difference at line %d); regenerate with\n"
              "    python3 bindings/julia/Koila.jl/gen/generate.py" % (args.output, first + 1), file=sys.stderr)
    header_names = crude_header_names(header_text)
    bound = ccall_bound_names(current)
    missing = sorted(header_names - bound)
    extra = sorted(bound - header_names)
    if missing:
        ok = False
        print("generate.py --check: %d function(s) of the header have no ccall in %s: %s"
              % (len(missing), args.output, ", ".join(missing)), file=sys.stderr)
    if extra:
        ok = False
        print("generate.py --check: %d ccall function(s) in %s are not in the header: %s"
              % (len(extra), args.output, ", ".join(extra)), file=sys.stderr)
    parsed = {f["name"] for f in h.functions}
    if parsed != header_names:
        ok = False
        print("generate.py --check: the parser and the regex scan disagree: %s"
              % ", ".join(sorted(parsed ^ header_names)), file=sys.stderr)
    if ok:
        print("%s is current: %d functions of %s, each bound by a ccall"
              % (os.path.basename(args.output), len(header_names), label))
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
