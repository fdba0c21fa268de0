"""One line of a rank's report, written with a single write(2): the ranks share torchrun's
stdout, and print() may write the text and its newline separately (unbuffered output), which
interleaves the lines of concurrent ranks."""

import os


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())
