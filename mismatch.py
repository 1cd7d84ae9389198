"""
Claims 2-4 measured directly: for a model, the same batch in training mode and in eval mode, and at
the input and the output of every linear projection the per-token mean shift, the batch-mean shift
(both over 32 masks, less their noise floor) and the variance ratio, for each dropout site
(model.dropout_mismatch).

    python mismatch.py             # a small random model, one column group per site
    python mismatch.py out/vpad    # a trained run, on rows of its validation data
"""

import os
import sys

import numpy as np
import torch

import rundir
import sample_data
from model import GPT, SITES, GPTConfig, dropout_mismatch


def main(argv):
    usage = "python mismatch.py [RUN_DIR or RUN_DIR/ckpt.pt]: the train-vs-eval mismatch per layer and dropout site"
    if argv in (['-h'], ['--help']):
        print(usage)
        return
    if len(argv) > 1 or argv and argv[0].startswith('-'):
        raise SystemExit(f"unknown argument(s) {' '.join(argv)}: {usage}")
    torch.manual_seed(0)
    if argv:
        # a missing or foreign checkpoint is one line, not a traceback
        ckpt = rundir.load_checkpoint(rundir.ckpt_path(argv[0]), "give the run dir of a train.py run",
                                      keys=('model', 'model_args', 'config'))
        cfg = dict(ckpt['model_args'])
        T, data_dir = cfg['block_size'], ckpt['config']['data_dir']
        sample_data.make_corpus(ckpt['config'], "rerun this command")     # the run's data, generated again if gone
        if not os.path.exists(os.path.join(data_dir, 'val.bin')):
            raise SystemExit(f"{data_dir}/val.bin is missing though {data_dir}/meta.json is there: "
                             f"delete {data_dir} and rerun this command to generate the run's data again")
        ids, _ = sample_data.load_split(data_dir, 'val')
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
    main(sys.argv[1:])
