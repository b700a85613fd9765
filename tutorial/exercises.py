"""
exercises.py: classroom exercises on this repository's own code, and their autograder.

    python tutorial/exercises.py list                                 # the exercises: name, file, function, topic
    python tutorial/exercises.py start route_topk [--workdir DIR]     # DIR/xmod.py with route_topk's body blanked
    python tutorial/exercises.py check route_topk [--workdir DIR]     # grade your copy: pass or fail, per check
    python tutorial/exercises.py check --all [--workdir DIR]          # every exercise against DIR's copies

Exit status of check: 0 every check passes; 1 a check fails (a blank not written yet included); 2 bad input (one
line on stderr); 4 not started (DIR has no copy of the exercise's file or no such function in it, or the function
is the repository's and the exercise was never started in DIR); 5 unchanged from the reference (started, and the
function is the repository's again, comments, layout and the names of local variables aside). Neither 4 nor 5 runs
the checks: the repository's own function would pass them. check --all exits 1 when an exercise or a whole-model
check fails, else 5 when one is unchanged, else 4 when one is not started, else 0.

An exercise is one function or method of xmod.py or fit_law.py. `start` copies the file into DIR (default
tutorial/work/, git-ignored) under the same name and replaces that function's body with `raise NotImplementedError`
and a hint; its docstring stays. The function is found by name with ast, so the repository's files carry no markers.
Starting a second exercise of the same file blanks that function in your existing copy and keeps your other work.

`check` imports DIR's copy under a fresh module name, with DIR first on sys.path (a file in DIR shadows the
repository's file of the same name, e.g. fit_law.py importing law/load.py; a file missing from DIR is the repository's)
and runs the exercise's checks (tutorial/graders.py). They test behaviour, never your source text: values computed
by hand or by the repository's own file (loaded separately, your weights copied in), causality, torch's FLOP counter,
gradients. When a check fails because of another function of your copy (your Attention.qkv under forward_fast, say),
a `note` line names that function and the exercise is not failed for it. `check --all` ends with whole-model checks:
your GPT of every family against the repository's with the same weights, and a freshly initialised one against a
fresh one of the repository's (tensor names and shapes, each tensor's mean and std, the scalars such as gains and
thresholds); a failure names your function that causes it. `start` records each exercise it starts in
DIR/exercises_started.txt, one name a line: that is how check tells an exercise never started from one whose work
was undone. Notes for teachers (the exercises' difficulty, time, expected output, collecting results honestly):
tutorial/TEACHERS.md.
"""
import ast
import contextlib
import copy
import difflib
import functools
import importlib.util
import itertools
import os
import sys
import textwrap
from collections import namedtuple

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from configurator import UserError, configure, defaults_of, one_line, run_main  # noqa: E402
from graders import GRADERS, WHOLE_MODEL, Fail  # noqa: E402  (tutorial/ is on sys.path: this file's folder)

WORKDIR = os.path.join(ROOT, 'tutorial', 'work')
STARTED = 'exercises_started.txt'           # in a workdir: the exercises `start` began there, one name a line

# check's exit status, beside 0 (every check passes) and 2 (bad input): an exercise nobody worked on is neither a pass
# nor a fail, and a teacher collecting exit codes must tell it apart (3 is train.py's diverged loss: not reused)
EXIT_FAIL, EXIT_NOT_STARTED, EXIT_UNCHANGED = 1, 4, 5
NOT_STARTED, UNCHANGED = 'not started', 'unchanged from the reference'

# ----------------------------------------------------------------------------------------------------------------------
# The exercises, in teaching order: name -> the file, the function's qualified name, what it is, and the hint that
# `start` writes into the blank body.

Exercise = namedtuple('Exercise', 'file qualname about hint')

EXERCISES = {
    'routed_k': Exercise(
        'xmod.py', 'routed_k', 'tokens a routed layer takes per sequence: round half up, never 0',
        'k = capacity * T rounded half up (not down, not half to even), and never less than 1.'),
    'route_topk': Exercise(
        'xmod.py', 'route_topk', "each sequence's own top-k: indices by position, mask, cut",
        "topk_cut gives each row's cut and its top k; return taken (the positions taken) sorted, mask (B, T) bool == "
        "scores > cut, and cut. Each sequence competes only with itself."),
    'apply_rope': Exercise(
        'xmod.py', 'apply_rope', "RoPE at each token's own (original) position",
        'Split the head dim in halves (x1, x2) and rotate each pair (x1_j, x2_j) by the angle whose cos/sin are '
        'given, per batch element and broadcast over heads.'),
    'forward_naive': Exercise(
        'xmod.py', 'RoutedBlock.forward_naive', 'the routed block, plainly: a loop over sequences, boolean masks',
        "For each sequence: its selected positions, the block's update f = self.block.delta(xs, pos) on those "
        "tokens at their original positions, then x + w * f on those rows only. Do not modify x in place."),
    'forward_fast': Exercise(
        'xmod.py', 'RoutedBlock.forward_fast', 'the routed block batched: gather, gated update, scatter-add',
        'Gather the k tokens of every sequence (B, k, C), f = self.block.delta(xs, taken) (RoPE at their positions), '
        'and scatter-add w * f back: the residual x is added once, unselected tokens stay exactly x.'),
    'router_score': Exercise(
        'xmod.py', 'Router.forward', "the router's score: variance-scaled (X-MoD) or raw (MoD)",
        "Variance gate: the unit-norm weight times RMSNorm(x_i) (F.rms_norm), per token, no statistic across "
        "positions. Plain gate: the raw w . x_i. Return (B, T). A weight passed in is that vector already."),
    'router_gate': Exercise(
        'xmod.py', 'Router.gate', "the gate on a routed token's update",
        'Variance gate: the learnable gain g_l times sigmoid(r). Plain gate (MoD): the raw score r. Both keep r '
        'on the gradient path.'),
    'update_threshold': Exercise(
        'xmod.py', 'Router.update_threshold', "the causal threshold: a debiased EMA of the batch's top-k cut",
        "cut = the cut between the batch's (B*k)-th and (B*k+1)-th highest scores (topk_cut on r flattened); "
        "thr_sum <- momentum * thr_sum + (1 - momentum) * cut; thr_steps += 1."),
    'depth_balance_loss': Exercise(
        'xmod.py', 'depth_balance_loss', "X-MoD's depth-wise token balancing loss",
        "Each token's soft routed depth is p summed over the R layers; the loss is the mean over tokens of "
        "(depth - target)^2, divided by R."),
    'moe_forward_fast': Exercise(
        'xmod.py', 'MoE.forward_fast', "the MoE's fast dispatch with a per-expert capacity",
        "Assignments in priority order (first choices, then second, each by token), sorted by expert (stable); "
        "a slot per assignment in an (E, cap, C) buffer, the rest dropped; one bmm per weight; weighted index_add."),
    'flops_per_token': Exercise(
        'xmod.py', 'flops_per_token', 'forward FLOPs per token of every family, from the config alone',
        "2mnp per matmul: LM head 2dV; a dense layer 24d^2 + 4Td; a routed layer k/T of that block's matmuls, "
        "k x k attention (4k^2 d/T) and its router (2d); an MoE layer its padded expert slots."),
    'match_flops': Exercise(
        'xmod.py', 'match_flops', 'FLOP-match a mod/xmod config to a dense one',
        'For each depth, the k (of T) whose FLOPs are closest to the dense model; keep depths within tol; pick the '
        'capacity closest to the target in ratio; ValueError when none fits. Reset gate and depth_balance to None.'),
    'dense_log_pred_torch': Exercise(
        'fit_law.py', 'dense_log_pred_torch', "the dense law's log L as a log-sum-exp, in torch",
        'log L = logsumexp(a - alpha log N, b - beta log D, e): torch.logsumexp over a stacked dim, so nothing '
        'overflows and L-BFGS gets gradients.'),
    'dense_objective': Exercise(
        'fit_law.py', 'dense_objective', "the dense law's objective: summed Huber loss on log L",
        'r = dense_log_pred_torch(theta, logN, logD); the sum over runs of w * huber(r - logL) with '
        'delta=HUBER_DELTA (torch.nn.functional.huber_loss, reduction none).'),
    'wls': Exercise(
        'fit_law.py', 'wls', "the relative law's weighted least squares (no intercept)",
        "Scale X's rows and y by sqrt(w) and solve with np.linalg.lstsq; no intercept column: Delta must vanish "
        "at rho = 1."),
}


# ----------------------------------------------------------------------------------------------------------------------
# Blanking a function: its body's line range, found with ast

def find_def(tree, qualname):
    """The FunctionDef at qualname ('f' or 'Class.method') in a parsed module, or None."""
    node = tree
    for part in qualname.split('.'):
        node = next((n for n in getattr(node, 'body', []) if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            return None
    return node if isinstance(node, ast.FunctionDef) else None


def has_docstring(node):
    first = node.body[0]
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


class Normalised(ast.NodeTransformer):
    """A function's tree as `unchanged from the reference` compares it: no docstring, no `pass`, and each local
    variable (a name the function assigns) renamed by the order it first appears in, so that renaming one does not
    make the repository's code another. Comments and layout are not in a tree to begin with."""

    def __init__(self, node):
        self.local = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.names = {}

    def visit_Name(self, n):
        if n.id in self.local:
            n.id = self.names.setdefault(n.id, f'_local{len(self.names)}')
        return n

    def visit_Pass(self, n):
        return None


def code_of(node):
    """The function `node` as text to compare: equal for two functions that differ only in comments, layout,
    docstring, `pass` statements and the names of their local variables (Normalised)."""
    node = copy.deepcopy(node)
    if has_docstring(node) and len(node.body) > 1:
        node.body = node.body[1:]
    return ast.dump(Normalised(node).visit(node))


def body_span(lines, node):
    """(start, end, indent): the 0-based line range [start, end) of the function's body after its docstring."""
    first = node.body[0]
    indent = ' ' * first.col_offset
    if has_docstring(node):
        return first.end_lineno, node.end_lineno, indent
    start = first.lineno - 1
    while lines[start - 1].strip() == '' or lines[start - 1].lstrip().startswith('#'):
        start -= 1                                      # comments above the first statement belong to the body
    return start, node.end_lineno, indent


def replace_body(source, qualname, body):
    """source with the body of qualname (its docstring kept) replaced by `body` (any indentation)."""
    lines = source.splitlines(keepends=True)
    node = find_def(ast.parse(source), qualname)
    start, end, indent = body_span(lines, node)
    new = [indent + line if line.strip() else '\n' for line in textwrap.dedent(body).strip('\n').splitlines(True)]
    new[-1] = new[-1].rstrip('\n') + '\n'
    return ''.join(lines[:start] + new + lines[end:])


def blank_body(name):
    """What `start` writes in place of the body: the hint as comments, and the raise that `check` recognises."""
    hint = textwrap.wrap(f"Hint: {EXERCISES[name].hint}", 108)
    return '\n'.join([f'# Exercise {name}: write this body, then run python tutorial/exercises.py check {name}']
                     + ['# ' + line for line in hint]
                     + [f"raise NotImplementedError('exercise {name}: not written yet')"])


def read(path):
    with open(path, encoding='utf-8') as f:
        return f.read()


def start(name, workdir):
    ex = EXERCISES[name]
    if os.path.abspath(workdir) == ROOT:
        raise UserError(f"--workdir {show(workdir)} is the repository itself: start would blank its own {ex.file}")
    dest = os.path.join(workdir, ex.file)
    reference = find_def(ast.parse(read(os.path.join(ROOT, ex.file))), ex.qualname)
    existed = os.path.exists(dest)
    source = read(dest) if existed else read(os.path.join(ROOT, ex.file))
    try:
        node = find_def(ast.parse(source), ex.qualname)
    except SyntaxError as e:
        raise UserError(f"{show(dest)} does not parse (line {e.lineno}: {e.msg}): fix it, then start {name}") from None
    if node is None:
        raise UserError(f"{show(dest)} has no {ex.qualname} (renamed or deleted?): restore it, then start {name}")
    record_start(name, workdir)
    segment = ast.get_source_segment(source, node) or ''
    if f"NotImplementedError('exercise {name}:" in segment:
        print(f"{show(dest)} already exists and {ex.qualname} is blank in it (exercise {name} started): nothing "
              f"changed")
        return 0
    if ast.dump(node) != ast.dump(reference):
        print(f"{show(dest)} already exists and its {ex.qualname} differs from the repository's (your work on "
              f"{name}?): left as is. To start over, paste the repository's {ex.qualname} back and run start again.")
        return 0
    os.makedirs(workdir, exist_ok=True)
    with open(dest, 'w', encoding='utf-8') as f:
        f.write(replace_body(source, ex.qualname, blank_body(name)))
    if existed:
        print(f"{show(dest)} already exists: blanked {ex.qualname} in it; the rest of your copy is kept as it was")
    else:
        print(f"wrote {show(dest)}: a copy of {ex.file} with the body of {ex.qualname} blanked")
    print(f"write it there, then: python tutorial/exercises.py check {name}{flag(workdir)}")
    return 0


def started(workdir):
    """The exercises `start` began in workdir (its exercises_started.txt), as a set of names."""
    path = os.path.join(workdir, STARTED)
    return set(read(path).split()) if os.path.isfile(path) else set()


def record_start(name, workdir):
    if name not in started(workdir):
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, STARTED), 'a', encoding='utf-8') as f:
            f.write(name + '\n')


def untouched(name, workdir):
    """(NOT_STARTED or UNCHANGED, why) when workdir holds no work of the student's on exercise `name`, else None (the
    copy's function is theirs to grade). The repository's own function passes every check, so one that still is the
    repository's (the same code_of) is reported instead of graded: not started when `start` never began the exercise
    in workdir, unchanged from the reference when it did."""
    ex = EXERCISES[name]
    dest = os.path.join(workdir, ex.file)
    how = f"python tutorial/exercises.py start {name}{flag(workdir)}"
    if not os.path.isfile(dest):
        return NOT_STARTED, f"{show(workdir)} has no {ex.file} (begin with: {how})"
    try:
        node = find_def(ast.parse(read(dest)), ex.qualname)
    except SyntaxError:
        return None                                     # grading says that it does not load, and where
    if node is None:
        return NOT_STARTED, f"{show(dest)} has no {ex.qualname} (renamed or deleted?)"
    if code_of(node) != code_of(find_def(ast.parse(read(os.path.join(ROOT, ex.file))), ex.qualname)):
        return None
    if name not in started(workdir):
        return NOT_STARTED, (f"{ex.qualname} in {show(dest)} is the repository's and exercise {name} was never "
                             f"started in {show(workdir)} (begin with: {how})")
    return UNCHANGED, (f"{ex.qualname} in {show(dest)} is the repository's own code (comments, layout, docstring and "
                       f"the names of local variables aside): it passes every check by construction, so the checks "
                       f"do not run")


def flag(workdir):
    """The --workdir a printed command needs: none for the default."""
    return f" --workdir={show(workdir)}" if os.path.abspath(workdir) != WORKDIR else ''


def show(path):
    rel = os.path.relpath(path)
    return path if rel.startswith('..') else rel


# ----------------------------------------------------------------------------------------------------------------------
# Loading: the student's copy, the repository's own file (the reference), and the repository's file with some of the
# copy's functions put into it (to tell which function of the copy makes a check fail)

_fresh = itertools.count()
_references = {}


@contextlib.contextmanager
def isolated(paths):
    """sys.path with `paths` first and none of the repository's modules imported, so that a file executed inside
    imports its neighbours from paths[0] first; afterwards sys.path and sys.modules are as they were."""
    # the modules a copy may shadow: the root's files, and the law/ package's (fit_law.py imports law.load)
    ours = {f[:-3] for f in os.listdir(ROOT) if f.endswith('.py')} | {'law'}
    mine = lambda name: name.split('.')[0] in ours
    saved = {n: sys.modules.pop(n) for n in list(sys.modules) if mine(n)}
    saved_path, saved_bytecode = list(sys.path), sys.dont_write_bytecode
    sys.path[:0] = paths
    sys.dont_write_bytecode = True        # no stale .pyc of a copy the student edits within the same second
    try:
        yield
    finally:
        for n in [n for n in sys.modules if mine(n)]:
            sys.modules.pop(n)
        sys.modules.update(saved)
        sys.path[:], sys.dont_write_bytecode = saved_path, saved_bytecode


@functools.lru_cache(maxsize=64)
def compiled(source, path):
    """Compiling xmod.py is most of what importing it costs, and check --all imports the same text many times."""
    return compile(source, path, 'exec')


def execute(source, path, name):
    """source run as a module named `name` (path: the file its tracebacks name)."""
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path))
    sys.modules[name] = module            # dataclasses look their module up here, while the classes are made
    try:
        exec(compiled(source, path), module.__dict__)
    finally:
        sys.modules.pop(name, None)
    return module


@contextlib.contextmanager
def student(file, workdir):
    """Import workdir/file (or the repository's file when workdir has none) under a fresh module name, with workdir
    then the repository first on sys.path: the copy's own imports (fit_law.py -> law/load.py -> run_folder.py, xmod.py)
    find workdir's copies first. Afterwards sys.path and sys.modules are as they were, so checks do not leak."""
    path = os.path.join(workdir, file)
    path = path if os.path.isfile(path) else os.path.join(ROOT, file)
    with isolated([os.path.abspath(workdir), ROOT]):
        yield execute(read(path), path, f'_exercise_{os.path.splitext(file)[0]}_{next(_fresh)}'), path


def reference(file):
    """The repository's own file (xmod.py, fit_law.py), imported once under another module name with only the
    repository on the path: the graders' oracle, whatever the student's copies say."""
    if file not in _references:
        with isolated([ROOT]):
            _references[file] = execute(read(os.path.join(ROOT, file)), os.path.join(ROOT, file),
                                        f'_reference_{os.path.splitext(file)[0]}')
    return _references[file]


@functools.lru_cache(maxsize=64)
def definitions(source):
    """{qualname: FunctionDef} of a module's functions and its classes' methods ('f', 'Class.method'). Remembered:
    the search for a culprit asks again for the same sources (do not modify the nodes)."""
    defs = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            defs[node.name] = node
        elif isinstance(node, ast.ClassDef):
            defs.update({f'{node.name}.{n.name}': n for n in node.body if isinstance(n, ast.FunctionDef)})
    return defs


def differing(file, workdir):
    """The qualnames of the copy's functions that are not the repository's (compared as syntax trees, so comments
    and layout do not count), in the file's order; [] when workdir has no copy."""
    copy = os.path.join(workdir, file)
    if not os.path.isfile(copy):
        return []
    return differences(read(os.path.join(ROOT, file)), read(copy))


@functools.lru_cache(maxsize=64)
def differences(ours, theirs):
    ours, theirs = definitions(ours), definitions(theirs)
    return [q for q, node in theirs.items() if q in ours and ast.dump(node) != ast.dump(ours[q])]


def splice(ours, theirs, qualnames):
    """The repository's source `ours` with the definitions of `qualnames` taken from the copy's source `theirs`
    (decorators included), and the copy's own extra top-level functions appended (a helper the student wrote)."""
    lines, their_lines = ours.splitlines(keepends=True), theirs.splitlines(keepends=True)
    our_defs, their_defs = definitions(ours), definitions(theirs)
    span = lambda node: (min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1, node.end_lineno)
    edits = []
    for q in qualnames:
        start, end = span(their_defs[q])
        text = textwrap.dedent(''.join(their_lines[start:end]))
        indent = ' ' * our_defs[q].col_offset
        edits.append((*span(our_defs[q]), [indent + line if line.strip() else line
                                           for line in text.splitlines(keepends=True)]))
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = new
    extra = [q for q in their_defs if '.' not in q and q not in our_defs]
    for q in extra:
        lines += ['\n\n'] + their_lines[slice(*span(their_defs[q]))]
    return ''.join(lines)


_spliced = {}


def spliced(file, workdir, qualnames):
    """The repository's file with the copy's `qualnames` in it, imported under a fresh name. Remembered by source:
    the search for a culprit asks for the same one for several checks."""
    path = os.path.join(ROOT, file)                     # its blanks still read as FILE's (Grading.not_done)
    source = splice(read(path), read(os.path.join(workdir, file)), qualnames)
    if source not in _spliced:
        with isolated([ROOT]):
            _spliced[source] = execute(source, path, f'_spliced_{os.path.splitext(file)[0]}_{next(_fresh)}')
    return _spliced[source]


# ----------------------------------------------------------------------------------------------------------------------
# Running checks, and telling which function of the copy a failure comes from

class Grading:
    """One exercise's checks: `with g.check('what'):` runs one and records pass or fail with a one-line hint;
    `report` prints them. A note replaces a failure that the exercise's own function is not the cause of."""

    def __init__(self, name, path):
        self.name, self.path, self.results, self.notes = name, path, [], {}

    @contextlib.contextmanager
    def check(self, what):
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                yield
            hint = None
        except Fail as e:
            hint = str(e)
        except NotImplementedError as e:
            hint = self.not_done(e)
        except Exception as e:                                   # the student's code crashed: say how, in one line
            hint = f'raised {type(e).__name__}: {one_line(e)}'
        self.results.append((what, hint))

    def note(self, what, text):
        """The check `what` counts as passed for this exercise; the note says what else in the copy is off."""
        self.results = [(w, None if w == what else hint) for w, hint in self.results]
        self.notes[what] = text

    def report(self):
        for what, hint in self.results:
            print(f"  note  {what}: {self.notes[what]}" if what in self.notes else
                  f"  pass  {what}" if hint is None else f"  fail  {what}: {hint}")

    def not_done(self, e):
        """Which blank raised: this exercise's (not done yet), or another one's that this check calls."""
        tb = e.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        code = tb.tb_frame.f_code
        where = (os.path.basename(code.co_filename), getattr(code, 'co_qualname', code.co_name))   # 3.11: qualname
        blanks = {(ex.file, ex.qualname): n for n, ex in EXERCISES.items()}
        if where not in blanks:
            return f'raised NotImplementedError: {one_line(e)}'
        if blanks[where] == self.name:
            return f'not done yet: {where[1]} still raises NotImplementedError in {show(self.path)}'
        return (f"{where[1]} in your {where[0]} still raises NotImplementedError and this check needs it: finish "
                f"exercise {blanks[where]} first (or paste the repository's {where[1]} back)")


def run_grader(name, module, ref, path):
    """GRADERS[name] on module, its checks recorded (not printed) in the Grading returned."""
    g = Grading(name, path)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        try:
            GRADERS[name](module, ref, g)
        except Exception as e:                              # outside a check: building the test models failed
            g.results.append(('the checks build their models from your copy', f'{type(e).__name__}: {one_line(e)}'))
    return g


def culprit(file, workdir, fails, keep=()):
    """Which one function of the copy, put alone into the repository's file (beside `keep`, the exercise's own),
    makes `fails(module)` return a hint: (qualname, hint), or None when no single one does."""
    for q in differing(file, workdir):
        if q not in keep:
            try:
                hint = fails(spliced(file, workdir, [*keep, q]))
            except Exception as e:                          # e.g. a helper of the copy's that the repository lacks
                hint = f'{type(e).__name__}: {one_line(e)}'
            if hint is not None:
                return q, hint
    return None


def dependency_notes(g, ex, workdir, ref):
    """A check that fails on the copy but passes on the repository's file with only the exercise's function taken
    from the copy fails because of another function of the copy: the note names it instead of failing the exercise.
    Blanks of other exercises keep their own hint ('finish exercise X first')."""
    failed = [what for what, hint in g.results if hint is not None and 'still raises NotImplementedError' not in hint]
    if not failed or [q for q in differing(ex.file, workdir) if q != ex.qualname] == []:
        return
    rerun = lambda module: dict(run_grader(g.name, module, ref, g.path).results)
    alone = rerun(spliced(ex.file, workdir, [ex.qualname]))
    for what in failed:
        if alone.get(what, 'missing') is None:
            found = culprit(ex.file, workdir, lambda module: rerun(module).get(what), keep=[ex.qualname])
            g.note(what, f"your copy's {found[0]} differs from the repository's: {found[1]}. Your {ex.qualname} "
                         f"itself passes this check with the repository's {found[0]}" if found else
                   f"your {ex.qualname} passes this check in the repository's {ex.file}; in your copy something else "
                   f"it calls differs from the repository's (" + ', '.join(
                       q for q in differing(ex.file, workdir) if q != ex.qualname) + ')')


def grade(name, workdir):
    """Run one exercise's checks against workdir's copy (printing each); returns [(check, hint or None)]."""
    ex = EXERCISES[name]
    copy = os.path.join(workdir, ex.file)
    has_copy = os.path.isfile(copy)
    print(f"{name}: {ex.qualname} in " + (show(copy) if has_copy else f"the repository's {ex.file} "
                                                                       f"({show(workdir)} has no copy)"))
    try:
        ref = reference(ex.file)
        with student(ex.file, workdir) as (module, path):
            g = run_grader(name, module, ref, path)
            dependency_notes(g, ex, workdir, ref)
    except Exception as e:                                  # the copy does not even import
        g = Grading(name, copy)
        g.results.append(('your copy loads', f'{type(e).__name__}: {one_line(e)}'))
    g.report()
    return g.results


def whole_model(workdir):
    """check --all's last part: the copy's GPT of every family against the repository's with the same weights, and
    a fresh one against a fresh one (its initialisation; graders.WHOLE_MODEL). A failure names the copy's function
    that causes it, found one function at a time."""
    copy = os.path.join(workdir, 'xmod.py')
    print("whole model: every family's GPT in " + (show(copy) if os.path.isfile(copy) else
                                                   f"the repository's xmod.py ({show(workdir)} has no copy)")
          + " against the repository's: with the same weights, and freshly initialised")
    ref = reference('xmod.py')
    g = Grading('whole model', copy)
    try:
        with student('xmod.py', workdir) as (module, path):
            for what, check in WHOLE_MODEL:
                with g.check(what):
                    check(module, ref)
            g.results = [(what, hint if hint is None or 'still raises NotImplementedError' in hint else
                          f'{hint}: {named(dict(WHOLE_MODEL)[what], ref, workdir)}')
                         for what, hint in g.results]
    except Exception as e:
        g.results.append(('your copy loads', f'{type(e).__name__}: {one_line(e)}'))
    g.report()
    return g.results


def named(check, ref, workdir):
    """The copy's function that fails `check` when put alone into the repository's xmod.py, in words."""
    found = culprit('xmod.py', workdir, lambda hybrid: failure_of(check, hybrid, ref))
    if found:
        return f"your copy's {found[0]} differs from the repository's (put alone into the repository's xmod.py, it " \
               f"fails this check)"
    others = differing('xmod.py', workdir)
    return ("no one function of your copy does this alone in the repository's xmod.py; yours that differ: " +
            (', '.join(others) or 'none (look outside the functions: constants, class fields, imports)'))


def failure_of(check, module, ref):
    """check(module, ref)'s hint, or None when it passes."""
    g = Grading('whole model', '')
    with g.check(''):
        check(module, ref)
    return g.results[0][1]


# ----------------------------------------------------------------------------------------------------------------------
# The command line

# (configurator.py): the command, then the exercise, are bare arguments; --key=value or --key value
workdir = ''         # your copies (default '': tutorial/work/, git-ignored)
all = False          # check: every exercise, against the copies in --workdir (one whose file is missing there is
                     # not started), then the whole-model checks (on the repository's file where there is no copy)
DEFAULTS = defaults_of(globals())
COMMANDS = ('list', 'start', 'check')           # the docstring says what each does


def exercise(name):
    if name not in EXERCISES:
        close = difflib.get_close_matches(name, list(EXERCISES), n=1, cutoff=0.0)
        raise UserError(f"unknown exercise {name!r}" + (f"; did you mean {close[0]}?" if close else '')
                        + " (python tutorial/exercises.py list shows them all)")
    return name


def command_line(argv):
    """argv -> (command, exercise NAME or None, config), or a UserError naming what is wrong."""
    words = []
    cfg, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__, positional=words)
    if not words:
        raise UserError('give a command: list, start NAME or check NAME | --all (--help says more)')
    command, names = words[0], words[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=1, cutoff=0.0)
        raise UserError(f"invalid choice {command!r}: the command is list, start or check"
                        + (f"; did you mean {close[0]}?" if close else ''))
    if len(names) > (command != 'list'):
        raise UserError(f"{command}: unexpected argument {names[-1]!r}"
                        + ('' if command == 'list' else ' (one exercise at a time, or check --all)'))
    if cfg.all and command != 'check':
        raise UserError(f'{command}: --all goes with check')
    return command, (names[0] if names else None), cfg


def main(argv):
    command, name, cfg = command_line(argv)
    workdir = cfg.workdir or WORKDIR
    if command == 'list':
        width = max(map(len, EXERCISES))
        for name, ex in EXERCISES.items():
            print(f"{name:<{width}}  {ex.file} {ex.qualname}: {ex.about}")
        return 0
    if command == 'start':
        if name is None:
            raise UserError('start: give an exercise NAME (python tutorial/exercises.py list shows them all)')
        return start(exercise(name), workdir)
    if cfg.all == (name is not None):
        raise UserError('check: give an exercise NAME or --all (not both)')
    names = list(EXERCISES) if cfg.all else [exercise(name)]
    if not os.path.isdir(workdir):
        raise UserError(f"--workdir {show(workdir)} does not exist: start an exercise first "
                        f"(python tutorial/exercises.py start NAME)")
    outcome = {}                                        # name -> 'pass' | 'fail' | NOT_STARTED | UNCHANGED
    for n in names:
        skipped = untouched(n, workdir)
        if skipped:
            print(f"{n}: {skipped[0]}: {skipped[1]}")
            outcome[n] = skipped[0]
        else:
            outcome[n] = 'fail' if any(hint is not None for _, hint in grade(n, workdir)) else 'pass'
    by = {what: [n for n in names if outcome[n] == what] for what in ('pass', 'fail', UNCHANGED, NOT_STARTED)}
    if cfg.all:
        if len(by['pass']) == len(names):
            print(f"all {len(names)} exercises pass")
        for what in ('fail', 'pass', UNCHANGED, NOT_STARTED):
            if by[what] and len(by['pass']) < len(names):
                print(f"{len(by[what])} of {len(names)} exercises {what}: {', '.join(by[what])}")
        wrong = [what for what, hint in whole_model(workdir) if hint is not None]
        print(f"whole model: all {len(WHOLE_MODEL)} checks pass" if not wrong else
              f"whole model: {len(wrong)} of {len(WHOLE_MODEL)} checks fail")
        by['fail'] += wrong
    elif outcome[names[0]] in ('pass', 'fail'):
        print(f"{names[0]}: " + ('every check passes' if outcome[names[0]] == 'pass' else
                                 'not yet: see the hints above'))
    return (EXIT_FAIL if by['fail'] else EXIT_UNCHANGED if by[UNCHANGED] else
            EXIT_NOT_STARTED if by[NOT_STARTED] else 0)


if __name__ == '__main__':
    sys.exit(run_main('exercises.py', main))
