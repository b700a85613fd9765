"""
configurator.py: the command line of every script, as nanoGPT's configurator.py: module-level defaults, then a config
file (a path, or a name under config/), then --key=value (or --key value), each checked against its default's type,
with did-you-mean and a --help that lists each key with the comment beside its default (`configure`). A key whose
default is a list collects every --key given; a script that takes paths gets its bare arguments as a list. Also the exit codes and the
user-error type, `run_main`, which turns them into one line on stderr, and what --device and --dtype become.
"""
import ast
import builtins
import contextlib
import dataclasses
import difflib
import inspect
import io
import json
import os
import sys
import time
import tokenize
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
    (under torchrun, once: see say)."""
    if hasattr(sys.stdout, 'reconfigure'):
        sys.stdout.reconfigure(line_buffering=True)     # a redirected log gets each line as it is printed
    try:
        return fn(sys.argv[1:] if argv is None else argv)
    except UserError as e:
        say(f"{prog}: error: {e}")
        return EXIT_BAD_INPUT
    except LossDiverged as e:
        say(f"{prog}: {e}")
        return EXIT_DIVERGED
    except KeyboardInterrupt:
        say(f"{prog}: interrupted{'; ' + interrupted if interrupted else ''}")
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


RANK_GRACE_S = 10       # how long a torchrun rank other than 0 keeps quiet about an error (see say)


def say(line):
    """The one line of an error, on stderr. Under torchrun every rank meets the same bad input or loss, and torchrun
    stops all ranks as soon as one exits: a rank other than 0 waits RANK_GRACE_S first, so that rank 0 says it once
    (and is the "root cause" in torchrun's report). A rank still alive after that met an error of its own: it says it."""
    rank = os.environ.get('RANK', '0')
    if rank != '0':
        time.sleep(RANK_GRACE_S)
        line = f"[rank {rank}] {line}"
    print(line, file=sys.stderr)
    # torchrun then prints its own failure report, a traceback and some 40 lines after this one; the report ends
    # with the root cause's message, read from the file torchrun names here: the same line goes there, last
    error_file = os.environ.get('TORCHELASTIC_ERROR_FILE')
    if error_file:
        with contextlib.suppress(OSError):
            with open(error_file, 'w') as f:
                json.dump({'message': line, 'timestamp': str(int(time.time()))}, f)


# ----------------------------------------------------------------------------------------------------------------------
# The command line: defaults, then a config file, then --key=value

SETTING_TYPES = (bool, int, float, str, list, tuple)


def defaults_of(namespace, model=None, skip=()):
    """The module-level settings of a script: every public bool, int, float, str, list or tuple (a key given once
    per value: --holdout=A --holdout=B) defined above this call, but NAMES in capitals (constants). With
    model (a dataclass: train.py's GPTConfig), each of its fields is a setting too, with the field's default (None
    for a field typed Optional), except the fields in skip and those the script sets itself; they follow the last
    of the script's settings that is one of its fields, so --help keeps the model's keys together."""
    settings = {k: v for k, v in namespace.items() if not k.startswith('_') and type(v) in SETTING_TYPES
                and not k.isupper()}
    if model is None:
        return settings
    fields = {f.name: f.default for f in dataclasses.fields(model) if f.name not in skip and f.name not in settings}
    at = max((i + 1 for i, k in enumerate(settings) if k in {f.name for f in dataclasses.fields(model)}), default=0)
    items = list(settings.items())
    return dict(items[:at] + list(fields.items()) + items[at:])


def read_settings(path):
    """The module-level `key = literal` lines of a script, read from its text without running it (sweep.py reads
    train.py's defaults so, and imports no script)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    settings = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError, TypeError, SyntaxError):
                settings[node.targets[0].id] = ast.literal_eval(node.value)
    return settings


def optional_types(model):
    """{field: X} for a dataclass's fields typed Optional[X]: their default None says "the family's default", and
    a value given for one is read as an X."""
    hints = typing.get_type_hints(model) if model is not None else {}
    return {k: next(a for a in typing.get_args(t) if a is not type(None)) for k, t in hints.items()
            if typing.get_origin(t) is typing.Union and type(None) in typing.get_args(t)}


def key_comments(source):
    """{key: the comment on the line that sets its default, and on the comment lines indented below it}, for --help.
    source: a script's path (its module-level `key = default` lines) or a dataclass (its `key: type = default`)."""
    comments = {}
    with contextlib.suppress(OSError, TypeError, tokenize.TokenError, SyntaxError):
        if isinstance(source, type):
            text, sign = inspect.getsource(source), ':'
        else:
            with open(source, encoding='utf-8') as f:
                text, sign = f.read(), '='
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        # a script's keys start column 0; a dataclass's fields start the first indent of its body
        col = 0 if sign == '=' else next(t.end[1] for t in tokens if t.type == tokenize.INDENT)
        first = {}                      # line -> its first token (comment lines included)
        for i, t in enumerate(tokens):
            if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                first.setdefault(t.start[0], (i, t))
        key = None
        for line in sorted(first):
            i, t = first[line]
            if t.type == tokenize.NAME and t.start[1] == col and tokens[i + 1].string == sign:
                note = next((u for u in tokens[i:] if u.start[0] == line and u.type == tokenize.COMMENT), None)
                key = t.string if note else None
                if note:
                    comments[key] = note.string.lstrip('#').strip()
            elif key and t.type == tokenize.COMMENT and t.start[1] > col:
                comments[key] += ' ' + t.string.lstrip('#').strip()        # a comment continued below its line
            else:
                key = None
    return comments


def usage(doc, defaults, source, files=True, model=None):
    comments = {**key_comments(model), **key_comments(source)} if source else {}
    width = max(len(f"--{k}={v!r}") for k, v in defaults.items()) if defaults else 0
    how = '; a config file as a bare argument sets them too' if files else ''
    kinds = {type(v) for v in defaults.values()}
    flag = '; a bool alone is True' if bool in kinds else ''
    many = '; a list key once per value' if kinds & {list, tuple} else ''
    lines = [doc.strip(), '', f'options (--key=value or --key value{flag}{many}{how}):']
    for k, v in defaults.items():
        lines.append(f"  {f'--{k}={v!r}':<{width}}  {comments.get(k, '')}".rstrip())
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
            with contextlib.suppress(ValueError, SyntaxError):
                v = literal_eval(v.strip())
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
    raise UserError(f"config file not found: {name} (looked for it as a path and under {config_dir})")


def configure(argv, defaults, doc='', source=None, config_dir=os.path.join(ROOT, 'config'), files=True,
              positional=None, from_file=None, model=None, renamed=None):
    """argv -> (config namespace, set of keys given explicitly by a config file or the command line).
    -h/--help prints doc and every key with its default and the comment beside it in `source` (or, for the fields
    of the dataclass `model` that defaults_of added, in its class), then exits 0. A key whose default is None takes
    its type from model's annotation (Optional[X]). --key=value and --key value are the same, but for a bool key:
    a bare --flag is True, and the argument after it is not its value. A key whose default is a list (or tuple)
    takes one value each time it is given: the command line's values replace the default (or the config file's)
    and add up (--holdout=A --holdout B is [A, B]). A bare argument is a config file (files=True), or is appended to
    the list `positional` when one is given. The set `from_file`, when given, gets the keys whose value a config
    file set (and no later --key=value). renamed(key, value), when given, is the key an old spelling means today
    (run_folder.new_key): a config file or --key=value may still use it."""
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
                k = renamed(k, v) if renamed else k
                if k not in defaults:
                    raise unknown_key(k, defaults, f"in config file {path}")
                shown = f"{k} = {v!r} in {path}"
                cfg[k] = coerce_list(v, defaults[k], shown) if type(defaults[k]) in (list, tuple) else \
                    coerce(v, defaults[k], shown, cli=False, want=wants.get(k))
                explicit.add(k)
                from_file.add(k)
        else:
            key, eq, value = arg[2:].partition('=')
            if renamed:              # an old spelling, whose meaning may hang on its value (--key value too)
                given = value if eq else args[0] if args and not args[0].startswith('--') else ''
                key = renamed(key, given)
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


# ----------------------------------------------------------------------------------------------------------------------
# Devices: what --device and --dtype become

def pick_device(name, local_rank=None):
    """'' picks cuda, then mps, then cpu; under DDP each rank takes cuda:local_rank."""
    if not name:
        name = 'cuda' if torch.cuda.is_available() else 'mps' if torch.backends.mps.is_available() else 'cpu'
    kind = name.split(':')[0]
    if kind not in ('cpu', 'cuda', 'mps'):
        raise UserError(f"--device={name!r}: expected '' (auto) | cpu | cuda | cuda:N | mps")
    if kind == 'cuda' and not torch.cuda.is_available():
        raise UserError(f"--device={name}: no CUDA device is available (leave --device empty to pick one)")
    if kind == 'mps' and not torch.backends.mps.is_available():
        raise UserError(f"--device={name}: MPS is not available (leave --device empty to pick one)")
    if kind == 'cuda' and local_rank is not None:
        name = f'cuda:{local_rank}'        # DDP: one GPU per rank
    index = name.partition(':')[2] or '0'
    if kind == 'cuda' and not index.isdigit():
        raise UserError(f"--device={name!r}: expected cuda or cuda:N")
    if kind == 'cuda' and int(index) >= torch.cuda.device_count():
        raise UserError(f"device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)"
                        + (" (torchrun: --nproc_per_node at most that)" if local_rank is not None else ''))
    return name


# Dense (no sparsity) bf16/fp16 tensor-core peaks from NVIDIA's datasheets, TFLOP/s, for MFU: the first name that is
# part of torch.cuda.get_device_name wins, so the more specific names come first. Datasheets quote "with sparsity",
# twice these. Not in the table: pass --peak_tflops.
PEAK_TFLOPS = (('H100 PCIe', 756.0), ('H100 NVL', 835.0), ('H200 NVL', 835.0), ('H100', 989.0), ('H200', 989.0),
               ('H800', 989.0), ('B200', 2250.0), ('A100', 312.0), ('A800', 312.0), ('L40S', 362.0), ('L40', 181.0),
               ('L4', 121.0), ('A10G', 70.0), ('A10', 125.0), ('RTX 4090', 165.0), ('RTX 3090', 71.0),
               ('V100', 125.0), ('T4', 65.0))


def peak_tflops(dev, dtype, override=0.0):
    """The device's peak TFLOP/s for MFU: override when > 0, else the table's (PEAK_TFLOPS) for a CUDA device in
    bfloat16 or float16; 0.0 when unknown (a CPU, float32, a device not in the table)."""
    if override > 0:
        return override
    if not dev.startswith('cuda') or dtype not in ('bfloat16', 'float16'):
        return 0.0
    name = torch.cuda.get_device_name(dev)
    return next((tflops for key, tflops in PEAK_TFLOPS if key in name), 0.0)


DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}
ANY_DTYPE = ('',) + tuple(DTYPES)              # '' = auto


def check_dtype(name, choices=ANY_DTYPE):
    if name not in choices:
        shown = ' | '.join("'' (auto)" if c == '' else c for c in choices)
        raise UserError(f"--dtype={name!r}: expected {shown}")


def autocast(name, device_type, cuda_fallback='float16', choices=ANY_DTYPE):
    """--dtype -> (the dtype's name, the context forward passes run in: autocast to it, none for float32).
    '' = auto: bfloat16 on a CUDA device that has it, cuda_fallback on one that lacks it, float32 elsewhere.
    train.py falls back to float16, which its grad scaler keeps trainable (nanoGPT's choice); sample.py to float32,
    since a model trained in another dtype need not fit float16's range."""
    check_dtype(name, choices)
    dtype = name or ('float32' if device_type != 'cuda' else
                     'bfloat16' if torch.cuda.is_bf16_supported() else cuda_fallback)
    ctx = contextlib.nullcontext() if dtype == 'float32' else torch.autocast(device_type=device_type,
                                                                             dtype=DTYPES[dtype])
    return dtype, ctx


def cpu_lacks_matrix_instructions(dtype):
    """Whether this CPU multiplies dtype's matrices without instructions made for them (bfloat16: AVX512-BF16 or
    AMX; float16: AVX512-FP16 or AMX-FP16, as oneDNN sees them). Without them torch falls back to a kernel that
    takes 6-70x float32's time per matmul, and a short run of the default model 8x (docs/gpu.md).
    False for float32; None where this torch does not say."""
    if dtype == 'float32':
        return False
    check = {'bfloat16': '_is_mkldnn_bf16_supported', 'float16': '_is_mkldnn_fp16_supported'}[dtype]
    try:
        return not getattr(torch.ops.mkldnn, check)()
    except (AttributeError, RuntimeError):
        return None
