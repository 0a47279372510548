"""``python -m streamtopic``: the command line."""

from streamtopic.cli import run

if __name__ == "__main__":
    run()
