"""The ``pollux`` command line (``pip install "pollux-ai[cli]"``); see :mod:`pollux._cli.main`.

Nothing here is imported by ``import pollux``: the command's libraries (argparse, rich, and
pollard for ``--ledger``) load only when the command runs.
"""
