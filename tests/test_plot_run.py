"""tools/plot_run.py: one run's curves from its log.csv, on a tiny trained run, on a run still training (a row cut
mid-line) and on a dense run; bad input is refused in one line."""
import json
import shutil

import matplotlib
import pytest

matplotlib.use('Agg')

import plot_run

from conftest import TINY, TRAIN, assert_bad_input, run


def tiny_run(tmp_path, corpus, model):
    out = tmp_path / model
    r = run(TRAIN, f'--data_dir={corpus}', f'--model={model}', f'--out_dir={out}', *TINY)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith(f'its curves: python tools/plot_run.py {out}'), r.stdout[-300:]
    return out


def test_curves_of_a_routed_run_have_the_four_panels(tmp_path, corpus, capsys):
    out = tiny_run(tmp_path, corpus, 'xmod')
    capsys.readouterr()
    assert plot_run.main([str(out)]) == 0
    assert (out / 'curves.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert capsys.readouterr().out.strip() == f'wrote {out / "curves.png"}'
    titles = plot_run.draw(str(out), str(tmp_path / 'again.png'))
    assert titles == ['loss', 'learning rate', 'causal selection rate per routed layer', 'tokens/s']
    log = plot_run.read_log(str(out))
    assert [c for c in log if c.startswith('causal_rate_')] and log['val_loss_causal'][-1] is not None
    # the learning-rate panel is the schedule at every step, not the rate at the evaluations: its warmup ends where
    # the run's does, and it agrees with log.csv's rows where they are
    with open(out / 'run.json') as f:
        info = json.load(f)
    tokens, lrs = plot_run.lr_schedule(info)
    assert len(lrs) == info['n_iters'] + 1 > len(log['lr'])
    peak = tokens[lrs.index(max(lrs))] // info['tokens_per_iter']
    assert peak == info['config']['warmup_iters']
    for t, lr in zip(log['tokens'], log['lr']):
        assert abs(lrs[tokens.index(int(t))] - lr) < 1e-12


def test_a_run_still_training_is_drawn_without_its_torn_row(tmp_path, corpus):
    out = tiny_run(tmp_path, corpus, 'xmod')
    live = tmp_path / 'live'
    shutil.copytree(out, live)
    text = (live / 'log.csv').read_text()
    (live / 'log.csv').write_text(text + text.splitlines()[-1][:20])        # a row being written
    n = len(plot_run.read_log(str(out))['step'])
    assert len(plot_run.read_log(str(live))['step']) == n
    assert plot_run.main([str(live), f'--out={tmp_path / "live.png"}']) == 0


def test_dense_run_and_bad_input(tmp_path, corpus, capsys):
    out = tiny_run(tmp_path, corpus, 'dense')
    assert plot_run.main([str(out), f'--out={tmp_path / "d.png"}']) == 0
    assert plot_run.main(['--out', str(tmp_path / 'e.png'), str(out)]) == 0        # --out PNG, before the run
    assert (tmp_path / 'e.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    capsys.readouterr()
    assert_bad_input(plot_run.main([str(tmp_path / 'nowhere')]), capsys.readouterr().err, 'has no log.csv rows yet')
    assert not (tmp_path / 'nowhere').exists()


@pytest.mark.parametrize('args, needle', [
    ([], 'give a run folder (python tools/plot_run.py RUN [--out PNG])'),
    (['a', 'b'], 'one run folder at a time, not 2: a b'),
    (['a', '--out'], '--out: overrides are --key=value (or --key value)'),
    (['a', '--output=x.png'], "unknown key 'output' on the command line; did you mean --out?"),
])
def test_bad_command_lines_are_one_line(args, needle, capsys):
    assert_bad_input(plot_run.main(args), capsys.readouterr().err, f'tools/plot_run.py: error: {needle}')


def test_help_lists_out(capsys):
    with pytest.raises(SystemExit) as e:
        plot_run.main(['--help'])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith('tools/plot_run.py: one run')
    assert "--out=''  the PNG to write (default: RUN/curves.png)" in out
