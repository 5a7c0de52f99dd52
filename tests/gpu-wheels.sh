#!/usr/bin/env bash
# The wheels that tests/gpu-*.sh install on a CUDA machine whose Python (3.12) has PyTorch, Triton, pandas, PyYAML,
# requests and pytest but not this project's other needs: snakemake (the rehearsal's pipeline) with what it needs,
# jsonschema (the params schema) with what it needs, and sacremoses. Run here, where pip reaches a registry, from
# anywhere in the repository; the versions are this environment's (so those the tests passed with):
#
#     bash tests/gpu-wheels.sh [PYTHON]   # PYTHON: the environment whose versions to take (default .venv/bin/python)
#
# Writes .whl/ (ignored by git); about 27 MB. The names: what snakemake, jsonschema and sacremoses need, less what
# the CUDA image has; checked by running `rnnsearch rehearse` in an environment holding only that image's packages
# and these wheels. A package on PyPI only as source (connection-pool) is built here into a wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
names="snakemake snakemake-interface-common snakemake-interface-executor-plugins snakemake-interface-logger-plugins
snakemake-interface-report-plugins snakemake-interface-scheduler-plugins snakemake-interface-storage-plugins
annotated-types argparse-dataclass conda-inject configargparse connection-pool docutils dpath fastjsonschema gitdb
gitpython greenlet humanfriendly immutables jupyter-core nbformat platformdirs pulp pydantic pydantic-core
smart-open smmap sqlalchemy sqlmodel tenacity throttler traitlets typing-inspection yte
jsonschema jsonschema-specifications referencing rpds-py sacremoses"
platforms=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
    manylinux1_x86_64; do platforms+=" --platform $p"; done
mkdir -p .whl
for name in $names; do
    version=$("$python" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")
    "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        $platforms -d .whl "$name==$version" 2>/dev/null ||
        "$python" -m pip wheel -q --no-deps -w .whl "$name==$version"
done
ls .whl
