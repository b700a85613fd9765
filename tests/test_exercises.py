"""Tests of tutorial/exercises.py, the classroom exercises and their autograder. Every grader runs three ways: on the
repository's own code (it must pass), on the blank that `start` writes (it must fail, saying the exercise is not done
yet), and on typical mistakes written here as mutated copies of the function (it must fail with a hint naming the
mistake). Then the command line: list, start, check's exit codes, check --all, bad input."""
import ast
import glob
import os
import re
import subprocess
import sys
import textwrap

import pytest

import exercises
import graders

# these tests route causally on models no training step calibrated, on purpose (routing's mechanics, not its
# thresholds): xmod.py's one warning about it is expected here, and test_xmod.py checks that it is given
pytestmark = pytest.mark.filterwarnings('ignore:causal routing with thresholds that were never calibrated')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = os.path.join(ROOT, 'tutorial', 'exercises.py')
ENV = dict(os.environ, OMP_NUM_THREADS='1', PYTHONUNBUFFERED='1')


def read(path):
    with open(path, encoding='utf-8') as f:
        return f.read()


def reference_body(name):
    """The repository's body of the exercise's function, after its docstring."""
    ex = exercises.EXERCISES[name]
    source = read(os.path.join(ROOT, ex.file))
    lines = source.splitlines(keepends=True)
    start, end, _ = exercises.body_span(lines, exercises.find_def(ast.parse(source), ex.qualname))
    return ''.join(lines[start:end])


def write_copy(workdir, name, body):
    """workdir/FILE: the repository's file with the exercise's function body replaced by `body`."""
    ex = exercises.EXERCISES[name]
    source = exercises.replace_body(read(os.path.join(ROOT, ex.file)), ex.qualname, body)
    with open(os.path.join(workdir, ex.file), 'w', encoding='utf-8') as f:
        f.write(source)


def failures(name, workdir):
    return [hint for _, hint in exercises.grade(name, str(workdir)) if hint is not None]


def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, cwd=cwd, env=ENV,
                          timeout=300)


# ---------------------------------------------------------------------------------------------------------------------
# every grader: the reference passes, the blank fails, typical mistakes are named

@pytest.mark.parametrize('name', list(exercises.EXERCISES))
def test_reference_passes(name, tmp_path):
    assert failures(name, tmp_path) == []            # an empty workdir: the repository's files


@pytest.mark.parametrize('name', list(exercises.EXERCISES))
def test_blank_fails_saying_not_done(name, tmp_path):
    assert exercises.start(name, str(tmp_path)) == 0
    results = exercises.grade(name, str(tmp_path))
    assert results and all(hint is not None and 'not done yet' in hint for _, hint in results), results


def tweak(name, old, new):
    """The reference body with one line changed (the line must be there: xmod.py or fit_law.py moved otherwise)."""
    body = reference_body(name)
    assert old in body, (name, old)
    return body.replace(old, new)


MISTAKES = [
    ('routed_k', 'return int(capacity * T)', 'rounded down'),
    ('routed_k', 'return max(1, round(capacity * T))', 'half to even'),
    ('route_topk', """
        B = scores.size(0)
        cut, _ = topk_cut(scores.flatten(), B * k)                    # the B*k highest of the whole batch
        mask = scores > cut
        idx = torch.topk(scores.masked_fill(~mask, float('-inf')), k, dim=1).indices.sort(dim=1).values
        return idx, mask, cut.expand(B)
        """, 'whole batch'),
    ('route_topk', """
        cut, order = topk_cut(scores, k)
        mask = torch.zeros_like(scores, dtype=torch.bool).scatter(1, order, True)
        return order, mask, cut
        """, 'sort it by position'),
    ('apply_rope', """
        cos, sin = rope_tables(x.size(-1), x.size(2))                  # positions 0..T-1 of the subsequence
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
        """, 'renumbered'),
    ('forward_naive', None, 'residual is added twice'),
    ('forward_naive', None, 'renumbered'),
    ('forward_fast', """
        C = x.size(-1)
        index = taken.unsqueeze(-1).expand(-1, -1, C)
        xs = torch.gather(x, 1, index)
        out, _ = self.block(xs, taken)                                   # the block's output x + f, not its update f
        ws = torch.gather(w, 1, taken).unsqueeze(-1)
        return torch.scatter_add(x, 1, index, ws * out)
        """, 'residual is added twice'),
    ('forward_fast', None, 'renumbered'),
    ('router_score', 'return F.linear(x, self.weight).squeeze(-1)', 'raw scores'),
    ('router_score', """
        xn = (x - x.mean(1, keepdim=True)) / x.std(1, keepdim=True)    # normalised over the sequence
        return F.linear(xn, self.weight / self.weight.norm()).squeeze(-1)
        """, 'leaks the future'),
    ('router_gate', 'return torch.sigmoid(r) if self.variance else r', 'gain g_l is missing'),
    ('update_threshold', """
        self.thr_sum.mul_(self.momentum)                               # a fixed threshold at 0: sigmoid(r) > 0.5
        self.thr_steps.add_(1)
        """, 'fixed threshold'),
    ('update_threshold', """
        cut, _ = topk_cut(r.detach(), k)                               # each sequence's own cut, averaged
        self.thr_sum.mul_(self.momentum).add_((1 - self.momentum) * cut.mean())
        self.thr_steps.add_(1)
        """, "each sequence's cut averaged"),
    ('depth_balance_loss', 'return ((torch.sigmoid(p).sum(0) - target) ** 2).mean() / p.size(0)', 'sigmoid'),
    ('depth_balance_loss', 'return ((p.sum(0) - target) ** 2).mean()', 'not divided by r'),
    ('moe_forward_fast', None, 'capacity ignored'),
    ('moe_forward_fast', None, 'priority order'),
    ('flops_per_token', None, 'counted as dense'),
    ('match_flops', None, 'first depth'),
    ('dense_log_pred_torch', """
        a, alpha, b, beta, e = theta
        return torch.log(torch.exp(a - alpha * logN) + torch.exp(b - beta * logD) + torch.exp(e))
        """, 'overflow'),
    ('dense_objective', """
        r = dense_log_pred_torch(theta, logN, logD)
        return (w * 0.5 * (r - logL) ** 2).sum()
        """, 'squared loss'),
    ('dense_objective', """
        r = dense_log_pred_torch(theta, logN, logD)
        return (w * torch.nn.functional.huber_loss(r.exp(), logL.exp(), reduction='none', delta=HUBER_DELTA)).sum()
        """, 'instead of log l'),
    ('wls', """
        sw = np.sqrt(np.ones(len(y)) if w is None else w)
        X1 = np.column_stack([np.ones(len(y)), X])                     # with an intercept
        return np.linalg.lstsq(X1 * sw[:, None], y * sw, rcond=None)[0][1:]
        """, 'intercept'),
]


def mistaken_body(name, body, keyword):
    """The mistakes that are one changed line of a long reference body."""
    if body is not None:
        return body
    if name in ('forward_naive', 'forward_fast') and keyword == 'renumbered':
        old = 'self.block.delta(xs, pos)' if name == 'forward_naive' else 'self.block.delta(xs, taken)'
        new = 'self.block.delta(xs, torch.arange(xs.size(1)))'         # positions 0..k-1 after the gather
        return tweak(name, old, new)
    if name == 'forward_naive':
        return tweak(name, 'x[b, pos] + (w[b, pos].unsqueeze(-1) * f[0])',
                     'x[b, pos] + (w[b, pos].unsqueeze(-1) * (x[b, pos] + f[0]))')
    if name == 'moe_forward_fast' and keyword == 'capacity ignored':
        return 'cap = xf.size(0)    # every assignment gets a slot\n' + textwrap.dedent(reference_body(name))
    if name == 'moe_forward_fast':
        body = tweak(name, 'expert = tope.t().reshape(-1)', 'expert = tope.reshape(-1)')      # token by token
        body = body.replace('torch.arange(N, device=xf.device).repeat(K)',
                            'torch.arange(N, device=xf.device).repeat_interleave(K)')
        return body.replace('weight = weights.t().reshape(-1)', 'weight = weights.reshape(-1)')
    if name == 'flops_per_token':
        return tweak(name, "if kind == 'dense':", "if kind in ('dense', 'routed'):")
    if name == 'match_flops':
        return tweak(name, 'cands.sort(key=lambda cfg: (abs(math.log(cfg.capacity / capacity)), cfg.n_layer))',
                     'cands.sort(key=lambda cfg: cfg.n_layer)')
    raise AssertionError(f'no mutation for {name} {keyword}')


@pytest.mark.parametrize('name,body,keyword', MISTAKES, ids=[f'{n}-{k}' for n, _, k in MISTAKES])
def test_typical_mistake_is_named(name, body, keyword, tmp_path):
    write_copy(tmp_path, name, mistaken_body(name, body, keyword))
    hints = failures(name, tmp_path)
    assert any(keyword in h.lower() for h in hints), hints
    assert not any('not done yet' in h for h in hints)


def test_every_exercise_has_a_named_mistake():
    assert {n for n, _, _ in MISTAKES} == set(exercises.EXERCISES)


# ---------------------------------------------------------------------------------------------------------------------
# start: the blank, a second exercise in the same copy, a started one left alone

def test_start_blanks_the_body_and_keeps_the_rest_identical(tmp_path, capsys):
    assert exercises.start('route_topk', str(tmp_path)) == 0
    assert 'wrote' in capsys.readouterr().out
    ref = read(os.path.join(ROOT, 'xmod.py'))
    copy = read(tmp_path / 'xmod.py')
    ref_node = next(n for n in ast.parse(ref).body if getattr(n, 'name', '') == 'route_topk')
    node = next(n for n in ast.parse(copy).body if getattr(n, 'name', '') == 'route_topk')
    start, end = ref_node.body[0].end_lineno, ref_node.end_lineno        # the body after the docstring
    ref_lines, lines = ref.splitlines(), copy.splitlines()
    tail = len(ref_lines) - end
    assert lines[:start] == ref_lines[:start] and lines[len(lines) - tail:] == ref_lines[end:]
    assert ast.get_docstring(node) == ast.get_docstring(ref_node)
    assert len(node.body) == 2 and isinstance(node.body[1], ast.Raise)
    assert 'NotImplementedError' in ast.unparse(node.body[1]) and '# Exercise route_topk:' in copy


def test_a_second_exercise_blanks_in_the_existing_copy(tmp_path, capsys):
    exercises.start('route_topk', str(tmp_path))
    path = tmp_path / 'xmod.py'
    with open(path, 'a') as f:
        f.write('# my notes\n')                                          # the student's other work
    exercises.start('apply_rope', str(tmp_path))
    out = capsys.readouterr().out
    assert 'already exists' in out
    copy = read(path)
    assert copy.endswith('# my notes\n')
    assert "exercise route_topk: not written yet" in copy and "exercise apply_rope: not written yet" in copy
    # a function the student has begun is left alone, and so is a blank
    with open(path, 'w') as f:
        f.write(exercises.replace_body(copy, 'route_topk', 'return None  # half done'))
    before = read(path)
    exercises.start('route_topk', str(tmp_path))
    assert 'differs' in capsys.readouterr().out and read(path) == before
    exercises.start('apply_rope', str(tmp_path))
    assert 'is blank in it' in capsys.readouterr().out and read(path) == before


# ---------------------------------------------------------------------------------------------------------------------
# the command line

def test_list_names_every_exercise_first():
    r = cli('list')
    assert r.returncode == 0, r.stderr
    assert [line.split()[0] for line in r.stdout.splitlines()] == list(exercises.EXERCISES)
    assert 'forward_fast  ' in r.stdout and 'xmod.py RoutedBlock.forward_fast: ' in r.stdout


# route_topk written otherwise than the repository writes it, and correct: the student's own work
OWN_ROUTE_TOPK = """
    cut, top = topk_cut(scores, k)
    taken = torch.sort(top, dim=1).values
    mask = torch.zeros_like(scores, dtype=torch.bool).scatter(1, taken, True)
    return taken, mask, cut
    """


def test_start_check_fails_on_the_blank_unchanged_on_the_reference_passes_on_own_work(tmp_path):
    r = cli('start', 'route_topk', '--workdir', str(tmp_path))
    assert r.returncode == 0 and (tmp_path / 'xmod.py').exists(), r.stderr
    r = cli('check', 'route_topk', '--workdir', str(tmp_path))
    assert r.returncode == 1 and 'not done yet' in r.stdout and '  fail  ' in r.stdout, r.stdout + r.stderr
    write_copy(tmp_path, 'route_topk', reference_body('route_topk'))     # the student pastes the solution
    r = cli('check', 'route_topk', '--workdir', str(tmp_path))
    assert r.returncode == exercises.EXIT_UNCHANGED == 5, r.stdout + r.stderr
    assert r.stdout.startswith('route_topk: unchanged from the reference: ') and '  pass  ' not in r.stdout
    write_copy(tmp_path, 'route_topk', OWN_ROUTE_TOPK)
    r = cli('check', 'route_topk', '--workdir', str(tmp_path))
    assert r.returncode == 0 and '  fail  ' not in r.stdout and '  pass  ' in r.stdout, r.stdout + r.stderr


def test_the_reference_with_other_comments_layout_docstring_and_names_is_unchanged(tmp_path, capsys):
    exercises.start('route_topk', str(tmp_path))
    body = '\n'.join(line.split('#')[0].rstrip() + '   # my own comment' for line in
                     textwrap.dedent(reference_body('route_topk')).splitlines() if line.strip())
    body = 'pass\n' + re.sub(r'\b(taken|cut)\b', r'my_\1', body.replace(', k)', ',k )'))   # local names
    assert 'my_taken' in body and 'my_cut' in body and 'topk_cut' in body
    write_copy(tmp_path, 'route_topk', body)
    path = tmp_path / 'xmod.py'
    path.write_text(read(path).replace('Expert-choice top-k over each sequence', 'My docstring'), encoding='utf-8')
    capsys.readouterr()
    assert exercises.main(['check', 'route_topk', '--workdir', str(tmp_path)]) == exercises.EXIT_UNCHANGED
    assert 'unchanged from the reference' in capsys.readouterr().out


def test_check_says_not_started_without_a_copy_or_without_start(tmp_path, capsys):
    """An exercise never started grades as not started (exit 4), not as a pass on the repository's function: DIR
    without the file, the file without the function, the function as the repository has it and never started."""
    capsys.readouterr()
    assert exercises.main(['check', 'wls', '--workdir', str(tmp_path)]) == exercises.EXIT_NOT_STARTED == 4
    assert capsys.readouterr().out.startswith(f'wls: not started: {tmp_path} has no fit_law.py (begin with: ')
    exercises.start('route_topk', str(tmp_path))                       # xmod.py is there now, apply_rope untouched
    capsys.readouterr()
    assert exercises.main(['check', 'apply_rope', '--workdir', str(tmp_path)]) == exercises.EXIT_NOT_STARTED
    out = capsys.readouterr().out
    assert 'apply_rope: not started: ' in out and 'never started' in out and '  pass  ' not in out
    path = tmp_path / 'xmod.py'
    path.write_text(read(path).replace('def apply_rope(', 'def apply_rope_mine('), encoding='utf-8')
    assert exercises.main(['check', 'apply_rope', '--workdir', str(tmp_path)]) == exercises.EXIT_NOT_STARTED
    assert 'has no apply_rope (renamed or deleted?)' in capsys.readouterr().out
    assert exercises.started(str(tmp_path)) == {'route_topk'}


def test_check_all_on_an_empty_workdir_says_not_started(tmp_path):
    r = cli('check', '--all', '--workdir', str(tmp_path))
    assert r.returncode == exercises.EXIT_NOT_STARTED, r.stdout + r.stderr
    assert f'{len(exercises.EXERCISES)} of {len(exercises.EXERCISES)} exercises not started: routed_k, ' in r.stdout
    assert 'exercises pass' not in r.stdout and '  pass  ' not in r.stdout.split('\nwhole model')[0]
    assert f'whole model: all {len(graders.WHOLE_MODEL)} checks pass' in r.stdout


def test_check_all_fails_on_one_blank_and_says_which(tmp_path, capsys):
    exercises.start('wls', str(tmp_path))
    write_copy(tmp_path, 'route_topk', OWN_ROUTE_TOPK)                 # done by hand, without start: graded
    assert exercises.main(['check', '--all', '--workdir', str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert '1 of 15 exercises fail: wls\n1 of 15 exercises pass: route_topk\n13 of 15 exercises not started: ' in out


@pytest.mark.parametrize('args,says', [
    (['check', 'route_top'], 'did you mean route_topk?'),
    (['start', 'forward_fst'], 'did you mean forward_fast?'),
    (['check', 'route_topk', '--workdir', 'no/such/dir'], 'does not exist'),
    (['check'], 'NAME or --all'),
    (['check', 'wls', '--all'], 'NAME or --all'),
    (['lst'], 'invalid choice'),
])
def test_bad_input_exits_2_with_one_line(args, says, capsys):
    assert exercises.run_main('exercises.py', exercises.main, args) == 2
    captured = capsys.readouterr()
    assert captured.err.count('\n') == 1 and says in captured.err, captured.err


def test_help(capsys):
    with pytest.raises(SystemExit) as e:
        exercises.main(['--help'])
    shown = capsys.readouterr().out
    assert e.value.code == 0 and 'check --all [--workdir DIR]' in shown
    assert '; 4 not started (' in shown and '; 5 unchanged from the reference (' in shown
    assert "  --workdir=''" in shown and '  --all=False' in shown and 'tutorial/work/' in shown


# ---------------------------------------------------------------------------------------------------------------------
# check --all on a whole copy of xmod.py: the whole-model checks see mistakes outside the exercises' functions (or in
# functions no exercise blanks), and name the function; each exercise still passes, since it tests its own function

# (name, the line as the repository has it, the mistake, the function the hint must name)
WHOLE_COPY_MUTATIONS = [
    ('positions renumbered in Attention.qkv', 'cos, sin = self.cos[pos].to(qkv.dtype), self.sin[pos].to(qkv.dtype)',
     'cos, sin = self.cos[:T].to(qkv.dtype), self.sin[:T].to(qkv.dtype)', 'Attention.qkv'),
    ('positions renumbered in Attention.forward', 'q, k, v = self.qkv(x, pos)\n        if cache',
     'q, k, v = self.qkv(x, torch.arange(T, device=x.device))\n        if cache', 'Attention.forward'),
    ('residual added twice in RoutedBlock.forward', '            x = self.forward_fast(x, taken, w)\n',
     '            x = self.forward_fast(x, taken, w) + x * mask.unsqueeze(-1)\n', 'RoutedBlock.forward'),
    ('expert_slots rounding down', 'math.ceil(config.expert_capacity_factor',
     'math.floor(config.expert_capacity_factor', 'expert_slots'),
    ('Router.threshold without its debiasing',
     'return thr_sum / (1.0 - self.momentum ** thr_steps).clamp_min(1e-12)', 'return thr_sum', 'Router.debiased'),
    ('attention without its causal mask', 'is_causal=True, dropout_p', 'is_causal=False, dropout_p',
     'Attention.forward'),
    ('the gate missing when decoding one token',
     'x.index_add(0, seqs, (w * f).to(x.dtype))',
     'x.index_add(0, seqs, f.to(x.dtype))', 'RoutedBlock.forward_step'),
    ('causal routing updates landing on the first sequence',
     'is_real, token = is_real[:n], token[:n]', 'is_real, token = is_real[:n], taken.flatten()[slots]',
     'RoutedBlock.forward_fast_causal'),
    ('the MoE dropping by capacity in causal routing', 'm, aux = self.mlp(self.ln_2(x + a), routing)',
     'm, aux = self.mlp(self.ln_2(x + a))', 'Block.forward'),
    # initialisation: the twins' checks copy the repository's weights in, only the fresh-model check sees these
    ('the X-MoD gain initialised to 1/(s-1), not 1/sqrt(s-1)',
     'self.gain = nn.Parameter(torch.tensor(1.0 / math.sqrt(routed_per_span)))',
     'self.gain = nn.Parameter(torch.tensor(1.0 / routed_per_span))', 'Router.__init__'),
    ('the residual projections without their 1/sqrt(2 n_layer)',
     'nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.init_depth()))',
     'nn.init.normal_(p, mean=0.0, std=0.02)', 'GPT.__init__'),
]


def check_all(workdir, capsys):
    """check --all in this process (the repository's reference, its FLOP counts and the twins' weights are made
    once and reused by every test here): (exit status, stdout)."""
    capsys.readouterr()
    rc = exercises.main(['check', '--all', '--workdir', str(workdir)])
    return rc, capsys.readouterr().out


def whole_copy(workdir, old=None, new=None):
    source = read(os.path.join(ROOT, 'xmod.py'))
    if old is not None:
        assert source.count(old) == 1, old                              # xmod.py moved: update the mutation
        source = source.replace(old, new)
    with open(os.path.join(workdir, 'xmod.py'), 'w', encoding='utf-8') as f:
        f.write(source)


def test_check_all_on_an_unmodified_whole_copy_passes_the_whole_model_and_grades_no_exercise(tmp_path, capsys):
    """Its functions are the repository's: never started there, each xmod.py exercise is not started (exit 4, as the
    fit_law.py ones, with no copy); started, each is unchanged from the reference (exit 5). The whole model passes."""
    whole_copy(tmp_path)
    rc, out = check_all(tmp_path, capsys)
    assert rc == exercises.EXIT_NOT_STARTED, out
    assert '15 of 15 exercises not started' in out and f'whole model: all {len(graders.WHOLE_MODEL)} checks pass' in out
    assert '  fail  ' not in out and '  note  ' not in out and '  pass  ' not in out.split('\nwhole model')[0]
    assert exercises.differing('xmod.py', str(tmp_path)) == []
    (tmp_path / exercises.STARTED).write_text('\n'.join(exercises.EXERCISES) + '\n', encoding='utf-8')
    rc, out = check_all(tmp_path, capsys)
    assert rc == exercises.EXIT_UNCHANGED, out
    xmod_exercises = [n for n, ex in exercises.EXERCISES.items() if ex.file == 'xmod.py']
    assert f'{len(xmod_exercises)} of 15 exercises unchanged from the reference: ' + ', '.join(xmod_exercises) in out


@pytest.mark.parametrize('what,old,new,function', WHOLE_COPY_MUTATIONS, ids=[m[0] for m in WHOLE_COPY_MUTATIONS])
def test_check_all_names_the_function_of_a_mistake_outside_the_exercises(what, old, new, function, tmp_path, capsys):
    whole_copy(tmp_path, old, new)
    rc, out = check_all(tmp_path, capsys)
    assert rc == 1, out
    assert '15 of 15 exercises not started' in out                      # the exercises' own functions are untouched
    whole = out.split('\nwhole model: ')[1]
    fails = [line for line in whole.splitlines() if line.startswith('  fail  ')]
    assert fails and all(f"your copy's {function} differs from the repository's" in line for line in fails), fails
    assert f'whole model: {len(fails)} of {len(graders.WHOLE_MODEL)} checks fail' in out


def test_a_check_that_needs_another_function_names_it_and_passes(tmp_path, capsys):
    """forward_fast runs the copy's Block.delta, hence Attention.qkv: with qkv's positions renumbered, the check of
    the values names Attention.qkv in a note and forward_fast itself passes (exit 0)."""
    old, new = WHOLE_COPY_MUTATIONS[0][1:3]
    whole_copy(tmp_path, old, new)
    path = tmp_path / 'xmod.py'                        # forward_fast the student's own: the same, nested once
    body = 'if True:                               # my version\n' + textwrap.indent(
        textwrap.dedent(reference_body('forward_fast')), '    ')
    path.write_text(exercises.replace_body(read(path), 'RoutedBlock.forward_fast', body), encoding='utf-8')
    capsys.readouterr()
    assert exercises.main(['check', 'forward_fast', '--workdir', str(tmp_path)]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith('  note  ')]
    assert notes and all("your copy's Attention.qkv differs from the repository's" in n for n in notes), out
    assert 'renumbered' in notes[0] and '  fail  ' not in out


# ---------------------------------------------------------------------------------------------------------------------
# a secondary check that fails only because of the primary mistake says so instead of pointing elsewhere

def test_secondary_hints_follow_the_primary_mistake(tmp_path):
    write_copy(tmp_path, 'forward_fast', mistaken_body('forward_fast', None, 'renumbered'))
    hints = failures('forward_fast', tmp_path)
    assert 'renumbered' in hints[0] and not any("gate's gradient" in h for h in hints), hints
    assert any('as the values are (the first check)' in h for h in hints[1:]), hints
    write_copy(tmp_path, 'depth_balance_loss', 'return ((p.sum(0) - target) ** 2).mean()')
    hints = failures('depth_balance_loss', tmp_path)
    assert 'not divided by r' in hints[0].lower() and not any('keep p on the graph' in h for h in hints), hints
    assert any('follows from the loss not divided by R' in h for h in hints[1:]), hints


def test_interleaved_rope_pairs_fail_the_broadcast_check_as_a_knock_on(tmp_path):
    """apply_rope with interleaved pairs (x0, x1), (x2, x3): the first check names the pairing, and the check of a
    (1, T, hs/2) table, which broadcasts fine, says that it fails because of the first (TEACHERS.md)."""
    write_copy(tmp_path, 'apply_rope', textwrap.dedent("""\
        x1, x2 = x[..., 0::2], x[..., 1::2]
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)"""))
    hints = failures('apply_rope', tmp_path)
    assert len(hints) == 2 and 'interleaved' in hints[0], hints
    assert 'the first check' in hints[1] and 'interleaved' in hints[1], hints


def test_graders_are_one_per_exercise():
    import graders
    assert list(graders.GRADERS) == list(exercises.EXERCISES)
    assert all(f.__name__ == f'grade_{name}' for name, f in graders.GRADERS.items())


def test_an_exercise_is_named_by_the_function_it_blanks():
    assert exercises.exercise('routed_k') == 'routed_k'
    with pytest.raises(exercises.UserError, match="unknown exercise 'capacity_k'"):
        exercises.exercise('capacity_k')


def test_teachers_md_says_where_the_chapters_quote_each_exercise():
    """TEACHERS.md's table of the chapters that quote an exercise's function (the answer key beside the student):
    in full when every line of its body, comment lines aside, stands in one chapter's quotes, in part when some do."""
    quotes = {}
    for md in sorted(glob.glob(os.path.join(ROOT, 'tutorial', '[0-9][0-9]_*.md'))):
        blocks = re.findall(r'^```python\n(.*?)^```', read(md), flags=re.S | re.M)
        quotes[int(os.path.basename(md)[:2])] = {line.strip() for b in blocks if '>>>' not in b
                                                 for line in b.splitlines()}
    teachers = read(os.path.join(ROOT, 'tutorial', 'TEACHERS.md'))
    for name in exercises.EXERCISES:
        body = [line.strip() for line in reference_body(name).splitlines()
                if line.strip() and not line.strip().startswith('#')]
        found = {chapter: sum(line in lines for line in body) for chapter, lines in quotes.items()}
        chapter = max(found, key=lambda c: (found[c], -c))
        said = ('not quoted' if found[chapter] == 0 else
                f"chapter {chapter}, {'in full' if found[chapter] == len(body) else 'in part'}")
        assert f"| `{name}` | {said} |" in teachers, (name, said)
