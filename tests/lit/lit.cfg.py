# lit configuration for the per-pass FileCheck tests (see README.md in this directory).
import os
import shutil
import sys
import tempfile

import lit.formats

config.name = 'ccc'
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = ['.sched']
config.test_source_root = os.path.dirname(__file__)
# lit writes an Output/ directory next to every test it runs; keep it out of the source tree.
config.test_exec_root = lit_config.params.get(
    'exec_root', os.path.join(tempfile.gettempdir(), 'ccc-lit'))


def tool_path(param, env_var, names, hints=()):
    """A tool from --param PARAM=..., else $ENV_VAR, else PATH, else the hint directories."""
    path = lit_config.params.get(param) or os.environ.get(env_var)
    if path:
        return os.path.abspath(path)
    search_path = os.pathsep.join([os.environ.get('PATH', ''), *hints])
    for name in names:
        found = shutil.which(name, path=search_path)
        if found:
            return found
    lit_config.fatal(f'cannot find {names[0]}: pass --param {param}=PATH or set {env_var}')


llvm_bin = ['/usr/lib/llvm-14/bin']
ccc = tool_path('ccc', 'CCC_BIN', ['ccc'])
filecheck = tool_path('filecheck', 'FILECHECK', ['FileCheck', 'FileCheck-14'], llvm_bin)

# `not` is a builtin of lit's shell; FileCheck and ccc need their full paths.
config.substitutions.append(('%ccc', ccc))
config.substitutions.append((r'\bFileCheck\b', filecheck))
# Tests that read ccc's output as data (e.g. parse an SVG) run Python helpers from Inputs/.
config.substitutions.append(('%python', sys.executable))
