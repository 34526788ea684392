"""Builds kestrel._kestrel with the project's own CMake build (the same target that
PYTHONPATH=<build>/python imports in the tests), so pip and ctest use one build recipe.

    pip install --no-build-isolation ./python     # Debian's setuptools and pybind11

KESTREL_CMAKE_ARGS adds arguments to the CMake configure step (e.g. -DKESTREL_CUDA=OFF);
CMAKE_BUILD_PARALLEL_LEVEL sets the build's jobs (default: all cores).
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE_DIR = Path(__file__).resolve().parent.parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = Path(self.build_temp).resolve() / "cmake"
        configure = ["cmake", "-S", str(SOURCE_DIR), "-B", str(build_dir),
                     "-DCMAKE_BUILD_TYPE=Release", "-DKESTREL_TESTS=OFF", "-DKESTREL_PYTHON=ON",
                     f"-DPython3_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("KESTREL_CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "kestrel_python",
                        "-j", jobs], check=True)
        built = next((build_dir / "python/kestrel").glob("_kestrel*.so"))
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)


setup(
    packages=["kestrel"],
    package_dir={"kestrel": "kestrel"},
    ext_modules=[Extension("kestrel._kestrel", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
