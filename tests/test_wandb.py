"""--wandb_log=True: a tiny training with the real wandb in offline mode writes its offline run folder, and what
train.py logged to it equals log.csv; without the package, one line naming the pip command and nothing written."""
import builtins
import csv
import importlib.util
import os

import pytest

import train
from conftest import TINY, assert_bad_input

needs_wandb = pytest.mark.skipif(importlib.util.find_spec('wandb') is None, reason='wandb is not installed')


@needs_wandb
def test_wandb_offline_logs_what_log_csv_holds(tmp_path, corpus, monkeypatch):
    import wandb
    monkeypatch.setenv('WANDB_MODE', 'offline')
    monkeypatch.setenv('WANDB_SILENT', 'true')
    calls = []
    real_init = wandb.init

    def init(*args, **kwargs):
        wb = real_init(*args, **kwargs)
        real_log = wb.log
        wb.log = lambda data, step=None, **kw: (calls.append((step, dict(data))), real_log(data, step=step, **kw))
        return wb
    monkeypatch.setattr(wandb, 'init', init)
    out = tmp_path / 'run'
    assert train.main([f'--data_dir={corpus}', '--model=xmod', f'--out_dir={out}', *TINY,
                       '--wandb_log=True', '--wandb_run_name=tiny']) == 0
    runs = [d for d in os.listdir(out / 'wandb') if d.startswith('offline-run-')]
    assert len(runs) == 1 and any(f.endswith('.wandb') for f in os.listdir(out / 'wandb' / runs[0]))
    with open(out / 'log.csv') as f:
        rows = list(csv.DictReader(f))
    assert [step for step, _ in calls] == [int(r['step']) for r in rows]
    for (_, logged), row in zip(calls, rows):
        for key in ('val_loss', 'val_loss_causal', 'lr', 'tokens', 'causal_rate_1'):
            assert float(row[key]) == pytest.approx(logged[key], rel=1e-6), key
        assert set(logged) <= set(row)


def test_wandb_log_without_the_package_is_one_line(tmp_path, corpus, monkeypatch, capsys):
    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == 'wandb':
            raise ImportError('No module named wandb')
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, '__import__', no_wandb)
    out = tmp_path / 'run'
    rc = train.main([f'--data_dir={corpus}', f'--out_dir={out}', *TINY, '--wandb_log=True'])
    assert_bad_input(rc, capsys.readouterr().err, 'pip install wandb')
    assert not out.exists()


def test_wandb_log_without_a_login_is_one_line(tmp_path, corpus, monkeypatch, capsys):
    """wandb installed but not logged in (no API key, WANDB_MODE not offline): one line naming `wandb login` and
    WANDB_MODE=offline, exit 2, nothing written; wandb.init is never reached (it would print a 30-line traceback)."""
    import sys
    import types

    def init(*a, **k):
        raise RuntimeError('wandb.errors.UsageError: No API key configured. Use `wandb login` to log in.')
    fake = types.ModuleType('wandb')
    fake.api, fake.init = types.SimpleNamespace(api_key=None), init
    monkeypatch.setitem(sys.modules, 'wandb', fake)
    monkeypatch.delenv('WANDB_MODE', raising=False)
    monkeypatch.delenv('WANDB_API_KEY', raising=False)
    out = tmp_path / 'run'
    rc = train.main([f'--data_dir={corpus}', f'--out_dir={out}', *TINY, '--wandb_log=True'])
    assert_bad_input(rc, capsys.readouterr().err, 'wandb login', 'WANDB_MODE=offline')
    assert not out.exists()
