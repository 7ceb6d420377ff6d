#!/usr/bin/env python3
"""Tests of generate.py (ctest: julia.generator_selftest). Standard library only.

    python3 bindings/julia/Koila.jl/gen/test_generate.py
"""

import contextlib
import io
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate as G  # noqa: E402

PRELUDE = """
#ifndef MINI_H
#define MINI_H
#include <stddef.h>
#include <stdint.h>
#if defined(_WIN32)
#  define KOILA_API __declspec(dllexport)
#elif defined(__GNUC__)
#  define KOILA_API __attribute__((visibility("default")))
#else
#  define KOILA_API
#endif
#ifdef __cplusplus
extern "C" {
#endif
typedef struct koila_tensor koila_tensor;
typedef struct koila_status koila_status;
typedef enum koila_dtype { KOILA_FLOAT32 = 0, KOILA_INT64 = 4 } koila_dtype;
"""
EPILOGUE = """
#ifdef __cplusplus
}
#endif
#endif
"""


def mini(body):
    return PRELUDE + body + EPILOGUE


def parse(body):
    return G.parse_header(mini(body))


def quiet_main(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = G.main(args)
    return rc, out.getvalue(), err.getvalue()


class RealHeader(unittest.TestCase):
    def setUp(self):
        with open(G.DEFAULT_HEADER, encoding="utf-8") as fh:
            self.text = fh.read()

    def test_every_declared_function_is_parsed_and_bound(self):
        out, h = G.generate(self.text, "include/koila.h")
        crude = G.crude_header_names(self.text)
        self.assertGreater(len(crude), 100)
        self.assertEqual({f["name"] for f in h.functions}, crude)
        self.assertEqual(G.ccall_bound_names(out), crude)

    def test_deterministic(self):
        self.assertEqual(G.generate(self.text, "x")[0], G.generate(self.text, "x")[0])

    def test_constants_and_enums(self):
        out, h = G.generate(self.text, "include/koila.h")
        self.assertIn("const KOILA_NO_BATCH = typemin(Int64)", out)
        self.assertIn("@enum koila_code::Cint begin", out)
        self.assertIn("    KOILA_ERROR_INTERNAL = 9", out)
        self.assertIn("mutable struct koila_tensor end", out)

    def test_committed_file_is_current(self):
        rc, _, err = quiet_main(["--check"])
        self.assertEqual(rc, 0, err)


class Types(unittest.TestCase):
    def sig(self, decl):
        h = parse(decl)
        G.julia_names(h)
        f = h.functions[-1]
        return f["ret"], [(p[0], p[2]) for p in f["params"]]

    def test_mapping(self):
        ret, params = self.sig("""
KOILA_API koila_status *koila_all(koila_tensor **out, koila_tensor *const *ts, size_t n,
                                  const char *device, char *buf, const void *data, void *dst,
                                  int flag, double s, uint64_t bytes, int64_t dim,
                                  const int64_t *shape, size_t *needed, koila_dtype dtype,
                                  koila_dtype *dtype_out, const koila_tensor *t);""")
        self.assertEqual(ret, "Ptr{koila_status}")
        self.assertEqual(params, [
            ("Ptr{Ptr{koila_tensor}}", "out"), ("Ptr{Ptr{koila_tensor}}", "ts"), ("Csize_t", "n"),
            ("Cstring", "device"), ("Ptr{UInt8}", "buf"), ("Ptr{Cvoid}", "data"), ("Ptr{Cvoid}", "dst"),
            ("Cint", "flag"), ("Cdouble", "s"), ("UInt64", "bytes"), ("Int64", "dim"),
            ("Ptr{Int64}", "shape"), ("Ptr{Csize_t}", "needed"), ("koila_dtype", "dtype"),
            ("Ptr{koila_dtype}", "dtype_out"), ("Ptr{koila_tensor}", "t")])

    def test_returns(self):
        self.assertEqual(self.sig("KOILA_API const char *koila_v(void);"), ("Cstring", []))
        self.assertEqual(self.sig("KOILA_API void koila_f(koila_tensor *t);")[0], "Cvoid")
        self.assertEqual(self.sig("KOILA_API int64_t koila_n(const koila_tensor *t);")[0], "Int64")
        self.assertEqual(self.sig("KOILA_API koila_dtype koila_d(const koila_tensor *t);")[0], "koila_dtype")

    def test_julia_keywords_are_renamed(self):
        _, params = self.sig("KOILA_API void koila_f(int64_t end, int64_t function, int64_t fptr);")
        self.assertEqual([p[1] for p in params], ["end_", "function_", "fptr_"])

    def test_multiline_declaration_and_docs(self):
        h = parse("""
/* Adds. */
KOILA_API koila_status *koila_add(koila_tensor **out,
                                  const koila_tensor *a,
                                  const koila_tensor *b);""")
        f = h.functions[0]
        self.assertEqual(f["name"], "koila_add")
        self.assertEqual(len(f["params"]), 3)
        self.assertEqual(f["doc"], "Adds.")

    def test_callback_typedef(self):
        h = parse("""
/* Reports. */
typedef void (*koila_cb)(void *user, const char *what, int64_t done);
KOILA_API koila_status *koila_set_cb(koila_cb fn, void *user);""")
        self.assertEqual([(c[0], c[2]) for c in h.callbacks], [("koila_cb", "Reports.")])
        self.assertEqual([p[0] for p in h.functions[0]["params"]], ["koila_cb", "Ptr{Cvoid}"])
        text, _ = G.generate(mini("""
typedef void (*koila_cb)(void *user, const char *what, int64_t done);
KOILA_API koila_status *koila_set_cb(koila_cb fn, void *user);"""), "mini.h")
        self.assertIn("const koila_cb = Ptr{Cvoid}", text)

    def test_defines(self):
        h = parse("#define KOILA_A 7\n#define KOILA_B INT64_MIN\n#define KOILA_C (-3)\n"
                  "KOILA_API void koila_f(void);")
        self.assertEqual([(d[1], d[2]) for d in h.defines],
                         [("KOILA_A", "7"), ("KOILA_B", "typemin(Int64)"), ("KOILA_C", "-3")])


class Rejections(unittest.TestCase):
    def rejects(self, body, fragment):
        with self.assertRaises(G.ParseError) as cm:
            parse(body)
        self.assertIn(fragment, str(cm.exception))
        self.assertRegex(str(cm.exception), r"line \d+|conditional|found")

    def test_function_pointer(self):
        self.rejects("KOILA_API void koila_cb(void (*f)(int), void *user);", "not understood")

    def test_bad_callback_typedefs(self):
        self.rejects("typedef void (*koila_cb)(int);", "unnamed")
        self.rejects("typedef void (*koila_cb)(long x);", "unknown type 'long'")
        self.rejects("typedef void (*koila_cb)(void (*g)(int) , int x);", "not understood")
        self.rejects("typedef void (*koila_cb)(int x);\nKOILA_API void koila_f(koila_cb *p);",
                     "pointer to the function pointer type")

    def test_array_parameter(self):
        self.rejects("KOILA_API void koila_a(int64_t dims[4]);", "not understood")

    def test_varargs(self):
        self.rejects("KOILA_API void koila_log(const char *fmt, ...);", "not understood")

    def test_unknown_type(self):
        self.rejects("KOILA_API void koila_l(long x);", "unknown type 'long'")
        self.rejects("KOILA_API void koila_u(unsigned int x);", "unknown type 'unsigned'")
        self.rejects("KOILA_API void koila_s(struct other *x);", "unknown type 'struct'")
        self.rejects("KOILA_API koila_thing *koila_t(void);", "unknown type 'koila_thing'")

    def test_unnamed_parameter(self):
        self.rejects("KOILA_API void koila_f(int);", "unnamed")
        self.rejects("KOILA_API void koila_g(const koila_tensor *);", "not understood")

    def test_empty_parameter_list(self):
        self.rejects("KOILA_API void koila_f();", "(void)")

    def test_struct_by_value(self):
        self.rejects("KOILA_API void koila_f(koila_tensor t);", "by value")

    def test_statements_not_understood(self):
        self.rejects("struct koila_point { int x; int y; };", "not understood")
        self.rejects("koila_status *koila_hidden(void);", "not understood")   # no KOILA_API
        self.rejects("KOILA_API void other_prefix(void);", "not understood")
        self.rejects("extern int koila_global;", "not understood")
        self.rejects("typedef int koila_int;", "not understood")

    def test_preprocessor(self):
        self.rejects("#define KOILA_F(x) ((x) + 1)\n", "unsupported #define")
        self.rejects("#define KOILA_S \"text\"\n", "cannot translate")
        self.rejects("#define OTHER 1\n", "unexpected macro")
        self.rejects("#include <stdio.h>\n", "unexpected include")
        self.rejects("#ifdef KOILA_EXTRA\nKOILA_API void koila_x(void);\n#endif\n", "unsupported conditional")
        self.rejects("#pragma once\n", "unsupported directive")

    def test_bad_enums(self):
        self.rejects("typedef enum koila_e { A = 1, B = 1 } koila_e;", "duplicate enum value")
        self.rejects("typedef enum koila_e { A = 1 << 2 } koila_e;", "enum item not understood")

    def test_duplicates(self):
        self.rejects("KOILA_API void koila_f(void);\nKOILA_API void koila_f(void);", "declared twice")

    def test_fixture_used_by_ctest(self):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata",
                            "unknown_declaration.h")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "LibKoila.jl")
            rc, _, err = quiet_main(["--header", path, "--output", out])
            self.assertNotEqual(rc, 0)
            self.assertIn("koila_on_progress", err)
            self.assertFalse(os.path.exists(out))


class Check(unittest.TestCase):
    def test_stale_and_missing_functions_are_reported(self):
        header = mini("KOILA_API void koila_a(koila_tensor *t);\n"
                      "KOILA_API int koila_b(const koila_tensor *t);\n")
        with tempfile.TemporaryDirectory() as d:
            hpath, out = os.path.join(d, "mini.h"), os.path.join(d, "LibKoila.jl")
            with open(hpath, "w") as fh:
                fh.write(header)
            self.assertEqual(quiet_main(["--header", hpath, "--output", out])[0], 0)
            self.assertEqual(quiet_main(["--header", hpath, "--output", out, "--check"])[0], 0)

            # A hand edit that drops a function's ccall.
            with open(out) as fh:
                text = fh.read()
            edited = re.sub(r"ccall\(fptr, Cint, \(Ptr\{koila_tensor\},\), t\)", "0", text)
            self.assertNotEqual(edited, text)
            with open(out, "w") as fh:
                fh.write(edited)
            rc, _, err = quiet_main(["--header", hpath, "--output", out, "--check"])
            self.assertEqual(rc, 1)
            self.assertIn("stale", err)
            self.assertIn("have no ccall", err)
            self.assertIn("koila_b", err)

            # The header gains a function the output lacks.
            with open(out, "w") as fh:
                fh.write(text)
            with open(hpath, "w") as fh:
                fh.write(header.replace("#ifdef __cplusplus\n}", "KOILA_API void koila_c(void);\n#ifdef __cplusplus\n}"))
            rc, _, err = quiet_main(["--header", hpath, "--output", out, "--check"])
            self.assertEqual(rc, 1)
            self.assertIn("koila_c", err)

    def test_missing_output(self):
        with tempfile.TemporaryDirectory() as d:
            rc, _, err = quiet_main(["--output", os.path.join(d, "none.jl"), "--check"])
            self.assertEqual(rc, 1)
            self.assertIn("cannot read", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
