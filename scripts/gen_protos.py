"""Regenerate the committed protobuf/gRPC stubs in provider/wire from protos/.

Run with the pinned grpcio-tools and mypy-protobuf from the `test` extra:
    python scripts/gen_protos.py            # write provider/wire/
    python scripts/gen_protos.py --check    # exit 1 if the committed stubs differ

The virtual include path `provider/wire=protos` makes the generated modules import each
other as `provider.wire.*`, so nothing is rewritten after generation.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ("externalgrpc.proto", "k8s_core_v1.proto", "k8s_resource_v1.proto")
PACKAGE = "provider/wire"
HEADER = '"""Generated from protos/ by scripts/gen_protos.py. Do not edit."""\n'


def generate(out: Path) -> None:
    from grpc_tools import protoc

    well_known = str(resources.files("grpc_tools") / "_proto")
    target = out / PACKAGE
    target.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    args = [
        "protoc",
        f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
        f"--proto_path={PACKAGE}={ROOT / 'protos'}",
        f"--proto_path={well_known}",
        f"--python_out={out}",
        f"--mypy_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_grpc_out={out}",
        *(f"{PACKAGE}/{name}" for name in PROTOS),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    (target / "__init__.py").write_text(HEADER)
    (target / "py.typed").write_text("")


def differing(generated: Path, committed: Path) -> list[str]:
    names = {p.name for p in generated.iterdir()} | {
        p.name for p in committed.iterdir() if p.is_file() and p.suffix in {".py", ".pyi", ".typed"}
    }
    out = []
    for name in sorted(names):
        a, b = generated / name, committed / name
        if not (a.exists() and b.exists() and filecmp.cmp(a, b, shallow=False)):
            out.append(name)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = Path(tmp) / PACKAGE
        committed = ROOT / PACKAGE
        if args.check:
            diff = differing(fresh, committed) if committed.exists() else ["(missing)"]
            if diff:
                print("stale generated stubs: " + ", ".join(diff), file=sys.stderr)
                return 1
            return 0
        if committed.exists():
            shutil.rmtree(committed)
        shutil.copytree(fresh, committed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
