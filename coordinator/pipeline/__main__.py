"""The pipeline without the `coordinator` wrapper, for Spark tooling.

    python -m coordinator.pipeline [--database-url URL] [--read-database-url URL]
        report|archive|audit [OPTIONS]

    entry=$(python -c 'import coordinator.pipeline.__main__ as m; print(m.__file__)')
    spark-submit --master spark://host:7077 "$entry" report --output /shared/report

Exactly `coordinator pipeline ...`: same options, same exit codes. Under
spark-submit the job keeps the master and settings spark-submit was given.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    from coordinator.cli import app

    app(args=["pipeline", *(sys.argv[1:] if argv is None else argv)], prog_name="coordinator")


if __name__ == "__main__":
    if not __package__:
        # Run as a file (spark-submit): this folder's modules (report, tables,
        # ...) must not shadow top-level ones of the same name.
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    main()
