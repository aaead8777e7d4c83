"""``python -m ibdiag`` runs the same command line as the ``ibdiag`` console script."""

from ibdiag.cli.main import run

if __name__ == "__main__":
    run()
