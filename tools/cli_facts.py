"""Write gan_callbacks/cli/cli_facts.json: the library's defaults, choices and docstrings that the command line's parser states
(`commands.cli_facts`), so that the parser answers --help without importing torch and fastai.

    python tools/cli_facts.py           # after changing a default, a choice or a command's docstring
    python tools/cli_facts.py --check   # fail when the file and the library disagree (make check-export)"""
import argparse, sys
from gan_callbacks.cli.parser import cli_facts_file
from gan_callbacks.cli.commands import write_cli_facts

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--check', action='store_true', help='write nothing: fail when the file is not what the library states')
    if not p.parse_args().check: write_cli_facts(cli_facts_file); print(f"wrote {cli_facts_file}")
    elif not write_cli_facts(cli_facts_file, check=True):
        sys.exit(f"{cli_facts_file} is not what the library states: run `python tools/cli_facts.py` and commit it")
