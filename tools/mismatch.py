"""
Claims 2-4 measured directly: for a model, the same batch in training mode and in eval mode, and at
the input and the output of every linear projection the per-token mean shift, the batch-mean shift
(both over 32 masks, less their noise floor) and the variance ratio, for each dropout site
(dropout_mismatch, which study/evals.py also runs on a study's trained runs).

    python -m tools.mismatch             # a small random model, one column group per site
    python -m tools.mismatch out/vpad    # a trained run, on rows of its validation data
"""

import configurator  # first: a script's Ctrl-C at start-up is one line (configurator.startup)

import os
import sys

import numpy as np
import torch
import torch.nn as nn

import sample_data
from model import GPT, SITES, GPTConfig
from base import rundir


def _mismatch(e, s, s2, mu_s, mu_s2, var_s, K):
    """One tensor at one layer: e its eval value (N tokens, C), and over K training-mode masks the
    sums of its value s, its square s2, its per-coordinate batch mean mu_s, mu_s2 and batch variance
    var_s. Shifts are in units of the eval RMS standard deviation over tokens; each has its mask-noise
    floor (what the mean over K masks of a mean-preserving noise still shows) measured and subtracted."""
    scale = e.var(0).mean().sqrt().clamp(min=1e-12)
    m = s / K                                                          # E over masks, per token: (N, C)
    floor2 = ((s2 / K - m ** 2) * K / (K - 1)).clamp(min=0).mean() / K  # var over masks / K, averaged
    token2 = (m - e).pow(2).mean()                                      # per token: E[y | x] against x
    mu_m, mu_e = mu_s / K, e.mean(0)                                    # per coordinate, over the batch
    mu_floor2 = ((mu_s2 / K - mu_m ** 2) * K / (K - 1)).clamp(min=0).mean() / K
    return {'token_shift': ((token2 - floor2).clamp(min=0).sqrt() / scale).item(),
            'token_floor': (floor2.sqrt() / scale).item(),
            'mean_shift': (((mu_m - mu_e).pow(2).mean() - mu_floor2).clamp(min=0).sqrt() / scale).item(),
            'mean_floor': (mu_floor2.sqrt() / scale).item(),
            'var_ratio': (var_s / K / e.var(0).clamp(min=1e-12)).mean().item(),
            'differs': bool(token2.sqrt() / scale > 1e-6)}

@torch.no_grad()
def dropout_mismatch(model, idx, n_masks=32, seed=0):
    """Run the same batch in eval mode and in train mode n_masks times, and for every linear layer
    compare, at its input and at its output (the pre-activations the next nonlinearity sees):
      token_shift: the conditional mean shift per token, RMS over tokens and coordinates of
                   E_masks[y | x] - y_eval, over the eval RMS sd (0 = each token's mean kept;
                   VPAD's own sites shrink it toward the batch mean: 1 - sqrt(1 - p) = 0.051 at p = 0.1)
      mean_shift:  the same for the per-coordinate mean over the batch (0 = the batch mean kept)
      var_ratio:   mean_i var_train_i / var_eval_i over the batch (1 = kept; inverted dropout adds
                   p/(1-p) sum_i W_ji^2 E[x_i^2] at the output)
    each shift with its mask-noise floor subtracted (token_floor, mean_floor: the floor itself), and
    reached: whether the layer's input differs between the modes at all (the layers a site reaches).
    -> list of dicts {layer, proj, reached, token_shift, ..., pre_act_token_shift, ...}, in forward order."""
    acc, evals = {}, {}

    def hook(name):
        def fn(module, args, out):
            for kind, t in (('in', args[0]), ('out', out)):
                t = t.double().reshape(-1, t.shape[-1])                   # (tokens, features)
                if not module.training:
                    evals[name, kind] = t
                    continue
                mu = t.mean(0)
                sums = acc.setdefault((name, kind), [0.0] * 5)
                for i, v in enumerate((t, t * t, mu, mu * mu, t.var(0))):
                    sums[i] = sums[i] + v
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    was_training = model.training
    try:
        model.eval()(idx)
        torch.manual_seed(seed)
        for _ in range(n_masks):
            model.train()(idx)
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    rows = []
    for name in dict.fromkeys(n for n, _ in evals):
        inp, out = (_mismatch(evals[name, k], *acc[name, k], n_masks) for k in ('in', 'out'))
        layer, _, proj = name.partition('.')[2].partition('.') if name.startswith('blocks.') else (None, '', name)
        reached, _ = inp.pop('differs'), out.pop('differs')
        rows.append({'layer': None if layer is None else int(layer), 'proj': proj, 'reached': reached,
                     **inp, **{'pre_act_' + k: v for k, v in out.items()}})
    return rows


def main(argv):
    usage = "python -m tools.mismatch [RUN_DIR or RUN_DIR/ckpt.pt]: the train-vs-eval mismatch per layer and dropout site"
    if argv in (['-h'], ['--help']):
        print(usage)
        return
    if len(argv) > 1 or argv and argv[0].startswith('-'):
        raise SystemExit(f"unknown argument(s) {' '.join(argv)}: {usage}")
    torch.manual_seed(0)
    if argv:
        # a missing or foreign checkpoint is one line, not a traceback
        path = rundir.ckpt_path(argv[0])
        if not os.path.exists(path):
            raise SystemExit(f"no checkpoint at {path}: give the run dir of a train.py run "
                             f"(python train.py config/vpad.py writes out/vpad)")
        ckpt = rundir.load_checkpoint(path, "give the run dir of a train.py run", keys=('model', 'model_args', 'config'))
        cfg = dict(vars(GPTConfig.from_checkpoint(ckpt['model_args'], path)))
        T, data_dir = cfg['block_size'], ckpt['config']['data_dir']
        sample_data.make_corpus(ckpt['config'], "rerun this command")     # the run's data, generated again if gone
        try:
            ids, _ = sample_data.load_split(data_dir, 'val')
        except FileNotFoundError as e:      # make_corpus found its meta.json, so it did not generate it again
            raise SystemExit(f"{e.filename} is missing though {os.path.join(data_dir, sample_data.META)} is there: "
                             f"delete {data_dir} and rerun this command to generate the run's data again") from None
        idx = torch.from_numpy(ids[:16 * T].astype(np.int64)).view(16, T)
        state, what = ckpt['model'], f"{argv[0]} (trained with {cfg['dropout_site']})"
    else:
        cfg = dict(vocab_size=512, n_layer=4, n_head=4, n_embd=128, window=64, nope_every=0, short_conv=0,
                   block_pattern='A')
        idx = torch.randint(0, 512, (8, 256))
        model = GPT(GPTConfig(**cfg))
        with torch.no_grad():  # trained models have coordinates with non-zero means; give the random one some
            model.wte.weight += 0.05 * torch.randn(cfg['n_embd'])
        state, what = model.state_dict(), "random model"
    cfg['dropout'] = cfg.get('dropout') or 0.1
    tables = {}
    for site in SITES:
        m = GPT(GPTConfig(**{**cfg, 'dropout_site': site}))
        m.load_state_dict(state)
        tables[site] = dropout_mismatch(m, idx)
    cols = ('token_shift', 'mean_shift', 'var_ratio')
    for where, pre in (("input", ''), ("output (pre-activation)", 'pre_act_')):
        print(f"\ntrain-vs-eval mismatch at each linear layer's {where}: {what}, dropout={cfg['dropout']}, batch "
              f"{tuple(idx.shape)}, 32 masks; tok = per-token mean shift, mean = batch mean shift (eval sds, "
              f"noise floor subtracted; 0 = kept), var = train / eval variance (1 = kept); * = the site's noise "
              f"does not reach it")
        print(f"{'layer.' + where.split()[0] + ' of':<18}" + "".join(f"{s + ' tok/mean/var':>30}" for s in SITES))
        for i, r in enumerate(tables['none']):
            print(f"{str(r['layer']) + '.' + r['proj']:<18}" + "".join(
                f"{'' if tables[s][i]['reached'] else '*':>3}" + "".join(f"{tables[s][i][pre + c]:9.4f}" for c in cols)
                for s in SITES))


if __name__ == '__main__':
    configurator.started()   # loaded: Ctrl-C is Python's KeyboardInterrupt again
    main(sys.argv[1:])
