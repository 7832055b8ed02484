# SPDX-License-Identifier: MIT
"""A PEP 517 build backend for the pinstage extension module.

It compiles the library's C sources (../src) and the module's (src/) into one
extension with setuptools' build_ext, then writes the wheel itself, so it
needs nothing beyond the interpreter, its headers and its setuptools: no
`wheel` package and no package index (pip install --no-build-isolation).
The CUDA driver is loaded at run time; no CUDA toolkit is needed.
"""
import base64
import glob
import hashlib
import os
import re
import sys
import sysconfig
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NAME = "pinstage"


def version():
    text = open(os.path.join(ROOT, "include", "pinstage.h")).read()
    parts = [re.search(r"#define PINSTAGE_VERSION_%s (\d+)" % k, text).group(1) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def sources():
    library = [p for p in sorted(glob.glob(os.path.join(ROOT, "src", "*.c"))) if not p.endswith("cuda_abi_check.c")]
    return library + sorted(glob.glob(os.path.join(HERE, "src", "*.c")))


def extension():
    from setuptools import Extension
    return Extension(
        NAME,
        sources=sources(),
        include_dirs=[os.path.join(ROOT, "include"), os.path.join(ROOT, "src"), os.path.join(HERE, "src")],
        define_macros=[("_GNU_SOURCE", None), ("PINSTAGE_STATIC_DEFINE", None)],
        extra_compile_args=["-std=c11", "-fvisibility=hidden", "-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers",
                            "-Wno-cast-function-type"],
        libraries=["dl", "pthread"],
    )


def tag():
    impl = "cp%d%d" % sys.version_info[:2]
    return "%s-%s-%s" % (impl, impl, sysconfig.get_platform().replace("-", "_").replace(".", "_"))


def metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
            "Summary: Fast CUDA host<->device transfers for NumPy, PyTorch and CuPy users\n"
            "License: MIT\nRequires-Python: >=3.9\n" % (NAME, version())).encode()


def dist_info():
    return "%s-%s.dist-info" % (NAME, version())


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    path = os.path.join(metadata_directory, dist_info())
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "METADATA"), "wb") as f:
        f.write(metadata())
    return dist_info()


def build_extension(build_lib):
    """Compiles the module into build_lib; returns its path."""
    from setuptools import Distribution
    dist = Distribution({"name": NAME, "ext_modules": [extension()]})
    cmd = dist.get_command_obj("build_ext")
    cmd.build_lib = build_lib
    cmd.build_temp = os.path.join(build_lib, "temp")
    cmd.ensure_finalized()
    cmd.run()
    return cmd.get_ext_fullpath(NAME)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with tempfile.TemporaryDirectory() as tmp:
        module = build_extension(tmp)
        files = {os.path.basename(module): open(module, "rb").read()}
    # The module's types, as a stub-only package (PEP 561) that mypy, pyright
    # and editors find beside it.
    files["pinstage-stubs/__init__.pyi"] = open(os.path.join(HERE, "pinstage.pyi"), "rb").read()
    info = dist_info()
    files[info + "/METADATA"] = metadata()
    files[info + "/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: pinstage_build\nRoot-Is-Purelib: false\nTag: %s\n"
                              % tag()).encode()
    files[info + "/LICENSE"] = open(os.path.join(ROOT, "LICENSE"), "rb").read()
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(info + "/RECORD,,")
    files[info + "/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = "%s-%s-%s.whl" % (NAME, version(), tag())
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return wheel


if __name__ == "__main__":
    # python3 python/pinstage_build.py DIR: the module built into DIR (no install).
    print(build_extension(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "build"))))
