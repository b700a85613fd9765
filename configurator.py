"""
configurator.py: the command line of every script, as nanoGPT's configurator.py: module-level defaults, then a config
file (a path, or a name under config/), then --key=value (or --key value), each checked against its default's type,
with did-you-mean and a --help that lists each key with the comment beside its default (`configure`). A key whose
default is a list collects every --key given; a script that takes paths gets its bare arguments as a list. Also the
exit codes and the user-error type: `run_main` turns them into one line on stderr.
"""
import builtins
import dataclasses
import difflib
import glob
import inspect
import os
import re
import sys
import types
import typing
from ast import literal_eval

import torch

ROOT = os.path.dirname(os.path.abspath(__file__))

EXIT_OK, EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_INTERRUPTED = 0, 2, 3, 130


class UserError(Exception):
    """Bad input the user can fix: printed as one line on stderr, exit code 2, nothing on disk touched."""


class LossDiverged(Exception):
    """The loss became NaN or inf: exit code 3, the last good checkpoint is kept."""


def one_line(e):
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def run_main(prog, fn, argv=None, interrupted=''):
    """fn(argv) -> exit code, with UserError -> 2, LossDiverged -> 3, Ctrl-C -> 130, each as one line on stderr
    (a KeyboardInterrupt's own message, when it has one, says what to do next; else `interrupted`)."""
    if hasattr(sys.stdout, 'reconfigure'):
        sys.stdout.reconfigure(line_buffering=True)     # a redirected log gets each line as it is printed
    rank = os.environ.get('RANK', '0')
    prefix = prog if rank == '0' else f"[rank {rank}] {prog}"     # torchrun: every rank says its own line
    try:
        return fn(sys.argv[1:] if argv is None else argv)
    except UserError as e:
        print(f"{prefix}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except LossDiverged as e:
        print(f"{prefix}: {e}", file=sys.stderr)
        return EXIT_DIVERGED
    except KeyboardInterrupt as e:
        advice = str(e) or interrupted
        print(f"{prefix}: interrupted{'; ' + advice if advice else ''}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def print_for_a_reader(text):
    """Print text on stdout, where a reader may stop early (`--help | head -1` closes the pipe): that is no error,
    so the rest goes nowhere instead of ending in a BrokenPipeError traceback."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Python flushes stdout once more at exit, which would raise again: point stdout at /dev/null first
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


# ----------------------------------------------------------------------------------------------------------------------
# The command line: defaults, then a config file, then --key=value

SETTING_TYPES = (bool, int, float, str, list, tuple)


def defaults_of(namespace, model=None, skip=()):
    """A script's module-level settings: every public bool, int, float, str, list or tuple defined above this
    call, but CAPITALS (constants). With model (a dataclass: GPTConfig), each of its fields but those in skip
    or set by the script, after the last of the script's settings that is one of them (--help groups them)."""
    settings = {k: v for k, v in namespace.items() if not k.startswith('_') and type(v) in SETTING_TYPES
                and not k.isupper()}
    if model is None:
        return settings
    names = {f.name for f in dataclasses.fields(model)}
    fields = {f.name: f.default for f in dataclasses.fields(model) if f.name not in skip and f.name not in settings}
    at = max((i + 1 for i, k in enumerate(settings) if k in names), default=0)
    items = list(settings.items())
    return dict(items[:at] + list(fields.items()) + items[at:])


def optional_types(model):
    """{field: X} for a dataclass's fields typed Optional[X]: their default None says "the family's default", and
    a value given for one is read as an X."""
    hints = typing.get_type_hints(model) if model is not None else {}
    return {k: next(a for a in typing.get_args(t) if a is not type(None)) for k, t in hints.items()
            if typing.get_origin(t) is typing.Union and type(None) in typing.get_args(t)}


def key_comments(lines, sign):
    """{key: its comment} for --help: the comment on the line that sets a key's default (`key = value  # ...` in a
    script, `key: type = value  # ...` in a dataclass), and the comment-only lines indented under it."""
    comments, key = {}, None
    setting = re.compile(r'^(\s*)(\w+)\s*' + sign + r'.*?\s#\s?(.*)$')
    for line in lines:
        m = setting.match(line)
        if m and (m[1] == '' or sign == ':'):
            key, comments[m[2]] = m[2], m[3].strip()
        elif key and line.startswith(' ') and line.strip().startswith('#'):
            comments[key] += ' ' + line.strip().lstrip('#').strip()
        else:
            key = None
    return comments


def usage(doc, defaults, source, files=True, model=None):
    comments = {}
    if model is not None:
        comments.update(key_comments(inspect.getsource(model).splitlines(), ':'))
    if source:
        with open(source, encoding='utf-8') as f:
            comments.update(key_comments(f.read().splitlines(), '='))
    width = max(len(f"--{k}={v!r}") for k, v in defaults.items()) if defaults else 0
    how = '; a list key once per value' if any(type(v) in (list, tuple) for v in defaults.values()) else ''
    how += '; a config file as a bare argument sets them too' if files else ''
    lines = [doc.strip(), '', f'options (--key=value or --key value; a bool alone is True{how}):']
    lines += [f"  {f'--{k}={v!r}':<{width}}  {comments.get(k, '')}".rstrip() for k, v in defaults.items()]
    return '\n'.join(lines)


def coerce_list(value, default, shown):
    """A config file's list for a list key: each item as the type of the default's items (str for an empty one)."""
    if type(value) not in (list, tuple):
        raise UserError(f"{shown}: expected a list (like the default {default!r})")
    return type(default)(coerce(v, default[0] if default else '', shown, cli=False) for v in value)


def coerce(value, default, shown, cli, want=None):
    """value (a string from the command line when cli, else a Python object from a config file) as the default's
    type (want: the type of a key whose default is None, which None, or on the command line None or nothing, keeps).
    int is accepted for float keys and an integral float (1e6) for int keys; bools are True/False/true/false/1/0 on
    the command line, True/False in a config file."""
    if default is None and (value is None or cli and value.strip() in ('', 'None')):
        return None
    want = want or type(default)
    if want is str:
        if isinstance(value, str):
            return value
    else:
        v = value
        if cli:
            try:
                v = literal_eval(v.strip())
            except (ValueError, SyntaxError):
                pass
        if want is bool:
            if cli and isinstance(v, str) and v.lower() in ('true', 'false'):
                return v.lower() == 'true'
            if isinstance(v, bool) or (cli and type(v) is int and v in (0, 1)):
                return bool(v)
        elif want is int:
            if type(v) is int:
                return v
            if type(v) is float and v.is_integer():
                return int(v)
        elif type(v) in (int, float):
            return float(v)
    like = 'or None, the default' if default is None else f'like the default {default!r}'
    raise UserError(f"{shown}: expected {want.__name__} ({like})")


def unknown_key(key, defaults, where):
    best = difflib.get_close_matches(key, list(defaults), n=1, cutoff=0.0)
    hint = f"; did you mean --{best[0]}?" if best else ''
    return UserError(f"unknown key {key!r} {where}{hint}")


def find_config_file(name, config_dir):
    """A bare argument: a path, or a name under config/, with or without .py."""
    for path in (name, name + '.py', os.path.join(config_dir, name), os.path.join(config_dir, name + '.py')):
        if os.path.isfile(path):
            return path
    known = [os.path.basename(p)[:-3] for p in glob.glob(os.path.join(config_dir, '*.py'))]
    best = difflib.get_close_matches(os.path.basename(name).removesuffix('.py'), known, n=1)
    hint = f"; did you mean {best[0]}?" if best else ''
    raise UserError(f"config file not found: {name} (looked for it as a path and under {config_dir}){hint}")


def configure(argv, defaults, doc='', source=None, config_dir=os.path.join(ROOT, 'config'), files=True,
              positional=None, from_file=None, model=None):
    """argv -> (config namespace, set of keys a config file or the command line gave). -h/--help prints doc and
    every key with its default and the comment beside it in `source` (or `model`'s class), then exits 0. A None
    default takes its type from model's Optional[X]. A bare --flag is True for a bool key; a list key adds up
    each value given (--holdout=A --holdout B is [A, B]). A bare argument is a config file (files=True), or goes
    to the list `positional`. The set `from_file` gets the keys a config file set (and no later --key=value)."""
    from_file = set() if from_file is None else from_file
    wants = optional_types(model)
    cfg, explicit = dict(defaults), set()
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ('-h', '--help'):
            print_for_a_reader(usage(doc, defaults, source, files and positional is None, model))
            sys.exit(EXIT_OK)
        if not arg.startswith('--'):
            if positional is not None:
                positional.append(arg)
                continue
            if not files:
                raise UserError(f"unexpected argument {arg!r}: options are --key=value (see --help)")
            path = find_config_file(arg, config_dir)
            ns = {'__file__': os.path.abspath(path)}
            try:
                with open(path) as f:
                    exec(builtins.compile(f.read(), path, 'exec'), ns)   # `compile` is a key of train.py
            except Exception as e:
                raise UserError(f"config file {path}: {type(e).__name__}: {one_line(e)}") from None
            for k, v in ns.items():
                if k.startswith('_') or isinstance(v, (types.ModuleType, types.FunctionType, type)):
                    continue          # imports and helpers a config file may use
                if k not in defaults:
                    raise unknown_key(k, defaults, f"in config file {path}")
                shown = f"{k} = {v!r} in {path}"
                cfg[k] = coerce_list(v, defaults[k], shown) if type(defaults[k]) in (list, tuple) else \
                    coerce(v, defaults[k], shown, cli=False, want=wants.get(k))
                explicit.add(k)
                from_file.add(k)
            continue
        key, eq, value = arg[2:].partition('=')
        if key not in defaults:
            raise unknown_key(key, defaults, 'on the command line')
        default = defaults[key]
        if not eq:
            if type(default) is bool:
                value = 'True'                          # a bare --flag turns a bool on
            elif args and not args[0].startswith('--'):
                value = args.pop(0)                     # --key value: the next argument is the value
                arg = f"--{key}={value}"                # as errors show it
            else:
                raise UserError(f"{arg}: overrides are --key=value (or --key value)")
        if type(default) in (list, tuple):
            item = coerce(value, default[0] if default else '', arg, cli=True)
            earlier = cfg[key] if key in explicit and key not in from_file else type(default)()
            cfg[key] = earlier + type(default)([item])
        else:
            cfg[key] = coerce(value, default, arg, cli=True, want=wants.get(key))
        explicit.add(key)
        from_file.discard(key)
    return types.SimpleNamespace(**cfg), explicit
