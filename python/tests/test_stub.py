# SPDX-License-Identifier: MIT
"""The type stub (python/pinstage.pyi) against the module it describes: the same
public names at the top and in every class, the same parameters where the
module states them (a text signature, or a docstring's first line), and the
stub installed beside the module as the stub-only package pinstage-stubs."""
import ast
import glob
import inspect
import os
import re
import unittest

import pinstage

STUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pinstage.pyi")
# Dunder members the stub describes because callers use them.
DUNDERS = {"__enter__", "__exit__", "__cuda_array_interface__", "__init__"}


def stub_tree():
    with open(STUB) as f:
        return ast.parse(f.read(), STUB)


def public(name):
    return not name.startswith("_") or name in DUNDERS


def members(body):
    """Names a stub body defines: functions, classes, annotated names."""
    out = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
    return out


def stub_params(fn):
    """Parameter names of a stub function, self / cls left out."""
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return names[1:] if names and names[0] in ("self", "cls") else names


def runtime_params(obj, name):
    """Parameter names the module states: its text signature, else a docstring
    that starts `name(a, b=1) -> ...`; None when it states none."""
    try:
        return [p for p in inspect.signature(obj).parameters if p not in ("self", "cls", "$self", "$type")]
    except (TypeError, ValueError):
        pass
    doc = (getattr(obj, "__doc__", None) or "").strip()
    m = re.match(re.escape(name) + r"\((.*?)\)", doc)
    if not m:
        return None
    params = []
    for part in m.group(1).split(","):
        part = part.strip().split("=")[0].strip()
        if part and part not in ("*", "/"):
            params.append(part)
    return params


def runtime_members(cls):
    names = {n for n in vars(cls) if public(n) and n != "__init__"}
    if issubclass(cls, tuple):  # a struct sequence: its fields, not its counts
        names -= {"n_fields", "n_sequence_fields", "n_unnamed_fields"}
    return names


class StubTest(unittest.TestCase):
    def setUp(self):
        self.top = members(stub_tree().body)

    def test_the_same_names_at_the_top(self):
        stubbed = {n for n in self.top if not n.startswith("_")} | ({"__version__"} & set(self.top))
        module = {n for n in dir(pinstage) if not n.startswith("_")} | {"__version__"}
        self.assertEqual(sorted(stubbed - module), [], "in the stub, not in the module")
        self.assertEqual(sorted(module - stubbed), [], "in the module, not in the stub")

    def test_the_same_members_in_every_class(self):
        for name, node in self.top.items():
            if not isinstance(node, ast.ClassDef) or name.startswith("_"):
                continue
            cls = getattr(pinstage, name)
            stubbed = {n for n in members(node.body) if n != "__init__"}
            if issubclass(cls, BaseException):
                # Set on the instance when raised, not on the class.
                self.assertEqual(stubbed, {"status", "name", "message"})
                continue
            with self.subTest(cls=name):
                self.assertEqual(sorted(stubbed - runtime_members(cls)), [], "in the stub only")
                self.assertEqual(sorted(runtime_members(cls) - stubbed), [], "in the module only")

    def test_the_same_parameters_where_the_module_states_them(self):
        checked = 0
        for name, node in self.top.items():
            if isinstance(node, ast.FunctionDef):
                pairs = [(name, node, getattr(pinstage, name))]
            elif isinstance(node, ast.ClassDef) and not name.startswith("_"):
                cls = getattr(pinstage, name)
                body = members(node.body)
                pairs = [(m, body[m], cls if m == "__init__" else getattr(cls, m, None))
                         for m in body if isinstance(body[m], ast.FunctionDef)]
            else:
                continue
            for member, fn, obj in pairs:
                stated = runtime_params(obj, member if member != "__init__" else name)
                if stated is None or any(d.id == "property" for d in fn.decorator_list if isinstance(d, ast.Name)):
                    continue
                with self.subTest(name=name, member=member):
                    self.assertEqual(stub_params(fn), stated)
                checked += 1
        self.assertGreater(checked, 40)  # most calls state their parameters

    def test_an_error_carries_what_the_stub_says(self):
        with self.assertRaises(pinstage.Error) as caught:
            pinstage.Profile.load(os.path.join(os.path.dirname(STUB), "no such profile"))
        e = caught.exception
        self.assertIsInstance(e.status, int)
        self.assertIsInstance(e.name, str)
        self.assertIsInstance(e.message, str)

    def test_installed_beside_the_module(self):
        site = os.path.dirname(os.path.abspath(pinstage.__file__))
        if not glob.glob(os.path.join(site, "pinstage-*.dist-info")):
            self.skipTest("the module was not installed by pip here")
        with open(os.path.join(site, "pinstage-stubs", "__init__.pyi")) as f, open(STUB) as g:
            self.assertEqual(f.read(), g.read())


if __name__ == "__main__":
    unittest.main()
