"""``python -m ibdiag`` runs the same command line as the ``ibdiag`` console script."""

from ibdiag.cli import app

if __name__ == "__main__":
    app(prog_name="ibdiag")
