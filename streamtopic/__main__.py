"""``python -m streamtopic``: the command line."""

from streamtopic.cli import main

if __name__ == "__main__":
    main()
