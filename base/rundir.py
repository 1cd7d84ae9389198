"""
Run-dir I/O in one place, for train.py, eval_lengths.py, ablate.py and sample_data.py: the
device, atomic writes, the training log and checkpoints, the lock that lets one process at a time
own a run dir, the link that ends a trainer with the ablate.py that started it, and the one-line
endings of an interruption or a disk error, which say where the run stands and the command that
continues it.
"""

import atexit
import contextlib
import ctypes
import errno
import fcntl
import io
import json
import os
import shlex
import shutil
import signal
import socket
import sys
import threading
import time

LOCK = 'owner.lock'   # in a run dir (or a corpus being generated) while a process owns it: "<pid> <host>"
HELD = set()          # this process's DirLocks, released at exit
STOP = {}             # the first SIGINT / SIGTERM exit_on_signals took ('signum'); 'exiting' once atexit runs


def pick_device(device):
    """'auto' -> 'cuda' or 'cpu'; anything unusable is a one-line error."""
    import torch        # here and in the checkpoint functions, not at the top: sample_data.py needs no torch
    if device == 'auto':
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    if device != 'cpu' and not device.startswith('cuda'):
        raise SystemExit(f"config error: device={device!r}: use 'auto', 'cpu', 'cuda' or 'cuda:N'")
    if device.startswith('cuda') and not torch.cuda.is_available():
        raise SystemExit(f"config error: device={device!r} but this machine has no CUDA GPU: use --device=cpu or auto")
    return device


def pick_dtype(dtype, device):
    """'auto' -> 'bfloat16' on a CUDA device that supports it, else 'float32'; any other as given."""
    import torch
    if dtype != 'auto':
        return dtype
    return 'bfloat16' if str(device).startswith('cuda') and torch.cuda.is_bf16_supported() else 'float32'


# settings train.py gained after runs were committed: a checkpoint without one trained as this value does
ADDED = {'cooldown_iters': 0, 'snapshots_after_fit': '', 'snapshots_at_iter': '', 'distractors': 0.0,
         'fast_kernels': True, 'state_passing': ''}

# the files train.py and eval_lengths.py write into a run dir: every other module asks for them here (a study's
# own files beside them are named in study/files.py)
CKPT = 'ckpt.pt'                  # the checkpoint (model, optimizer, settings, step, fit)
LOG = 'log.jsonl'                 # one record per eval: losses, the length eval, the fit
TOKENIZER = 'tokenizer.json'      # the corpus' tokenizer, copied for eval_lengths.py
LENGTH_EVAL = 'eval_lengths.json'           # eval_lengths.py's record (its plot: .png for .json, in the first run)
ABSENT_KEY_EVAL = 'eval_absent_key.json'    # ... with --absent_key=True, the key probe's


def branch_dir(out_dir, k, fixed=False):
    """The run dir of a trunk's cooldown branch from its snapshot at fit + k (cooldown<k>), or at step k of
    a trunk at fixed steps (at<k>, so that the two kinds never share a folder): inside the trunk's."""
    return os.path.join(out_dir, f"{'at' if fixed else 'cooldown'}{k}")


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository: base/ is one folder down


def git(*args):
    """git's output in the repository (its root, where paths are read from), stripped; None without git or
    outside a checkout."""
    import subprocess
    try:
        out = subprocess.run(['git', '-C', ROOT, *args], capture_output=True, text=True, timeout=20)
        return out.stdout.strip() if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(device='cpu'):
    """What made a number: the code's commit (and whether tracked files differ from it), torch and Python,
    the CPU model and the instruction set torch picks its CPU kernels by (AVX2, AVX512, ...: two CPUs of one
    model name can differ there), torch's thread count and the device. A run reproduces bit for bit on the
    same code, CPU kernels, torch and threads; elsewhere its per-seed values may differ. 'unknown' where not
    found."""
    import platform
    import torch
    commit = git('rev-parse', 'HEAD')
    changed = git('status', '--porcelain', '--untracked-files=no', '--', '*.py', 'requirements.txt')  # code, not docs or results
    cpu = 'unknown'
    with contextlib.suppress(OSError):
        with open('/proc/cpuinfo') as f:
            cpu = next((line.split(':', 1)[1].strip() for line in f if line.startswith('model name')), cpu)
    if cpu == 'unknown':
        cpu = platform.processor() or cpu
    device = str(device)
    if device.startswith('cuda'):
        device = f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return {'commit': commit or 'unknown', 'dirty': None if changed is None else bool(changed),
            'torch': torch.__version__, 'python': platform.python_version(), 'cpu': cpu,
            'cpu_capability': torch.backends.cpu.get_cpu_capability(), 'threads': torch.get_num_threads(),
            'device': device}


def ckpt_path(path):
    """A run dir -> its ckpt.pt; a checkpoint file's path as it is."""
    return os.path.join(path, CKPT) if os.path.isdir(path) else path


def size_text(n):
    """A number of bytes as a message says it: '3.2 GiB', or below 1 GiB '12.5 MiB' (not '0.0 GiB')."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def first_line(e):
    return (str(e).strip().splitlines() or [''])[0][:200]


# -----------------------------------------------------------------------------
# writes that leave the old file or the new one, and disk errors as one line

def write_atomic(path, data):
    """Write bytes to a temp file beside `path`, flush them to disk, then rename: a crash leaves the
    old file or the new one. Any error (a full disk, a signal) removes the temp file; its name
    carries the pid, so two processes caching one file never rename each other's."""
    tmp = f'{path}.{os.getpid()}.tmp'
    try:
        with open(tmp, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def append_line(path, line):
    """Append one line; on an error cut the file back, so a full disk leaves no torn line."""
    with open(path, 'a') as f:
        size = f.tell()
        try:
            f.write(line + '\n')
            f.flush()
        except OSError:
            with contextlib.suppress(OSError):
                f.truncate(size)
            raise


def read_log(path, upto):
    """The records of a run's log.jsonl up to iteration `upto`. A line that is not a record (a torn last
    line from a kill mid-write, or an edit) is skipped with a warning."""
    kept = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not (isinstance(record, dict) and isinstance(record.get('iter'), int)):
                print(f"warning: {path} line {n} is not a log record, skipped: {line.strip()[:60]!r}")
            elif record['iter'] <= upto:
                kept.append(record)
    return kept


def open_log(log_path, resumed, iter_num):
    """A fresh run moves aside the log of a run that died before its first checkpoint; a resumed
    run drops what was logged after its checkpoint, in an atomic rewrite. -> {iter: record}"""
    if not resumed:          # (a checkpoint here was refused before anything was generated)
        if os.path.exists(log_path):          # a run that died before its first checkpoint
            os.replace(log_path, log_path + '.old')
            print(f"moved the log of an earlier run without a checkpoint to {log_path}.old")
        return {}
    if os.path.exists(log_path):
        kept = read_log(log_path, iter_num)
        write_atomic(log_path, ''.join(json.dumps(r) + '\n' for r in kept).encode())
        return {r['iter']: r for r in kept}
    return {}


def where_it_stands(argv, out_dir, saved_iter, world_size):
    """How to go on after an interruption or a disk error: the command that resumes the run from
    its last checkpoint, or that starts it again when it has none yet."""
    launch = ['python'] if world_size == 1 else ['torchrun', '--standalone', f'--nproc_per_node={world_size}']
    if saved_iter is None:
        return f"start again with: {shlex.join(launch + ['train.py', *argv])} (nothing was saved yet)"
    argv = [a for a in argv if not a.startswith('--init_from=')] + ['--init_from=resume']
    return (f"resume with: {shlex.join(launch + ['train.py', *argv])} (it continues from the checkpoint "
            f"of iter {saved_iter}, {os.path.join(out_dir, CKPT)})")


def save_checkpoint(state, path):
    """torch.save into memory, then write_atomic: a full disk is then a plain OSError (ENOSPC),
    not torch's '[enforce fail at inline_container.cc] unexpected pos' from inside its zip writer."""
    import torch
    buf = io.BytesIO()
    torch.save(state, buf)
    write_atomic(path, buf.getbuffer())


# what train.py writes into every checkpoint; a file without them is another program's
CHECKPOINT_KEYS = ('model', 'optimizer', 'model_args', 'config', 'iter_num', 'tokenizer', 'finished', 'fit_iter')


def load_checkpoint(path, fix, keys=CHECKPOINT_KEYS):
    """The checkpoint at path (tensors on the CPU); one line naming it and `fix` if it is unreadable
    or not one of train.py's (a loadable torch file without `keys`: a reader of the weights alone
    asks for fewer, so a checkpoint of an older train.py still loads)."""
    import torch
    try:
        ckpt = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as e:
        raise SystemExit(f"{path} is not a readable checkpoint ({type(e).__name__}: {first_line(e)}); {fix}") from None
    missing = [k for k in keys if not isinstance(ckpt, dict) or k not in ckpt]
    if missing:
        raise SystemExit(f"{path} is not a checkpoint train.py wrote (no {', '.join(map(repr, missing[:3]))}"
                         f"{', ...' if len(missing) > 3 else ''}); {fix}")
    return ckpt


# errno -> (what went wrong, what to do about it)
DISK = {errno.ENOSPC: ('no space left on the device', 'free some space'),
        errno.EDQUOT: ('disk quota exceeded', 'free some space'),
        errno.EROFS: ('read-only file system', 'make {dir} writable'),
        errno.EACCES: ('permission denied', 'make {dir} writable'),
        errno.EPERM: ('permission denied', 'make {dir} writable')}


@contextlib.contextmanager
def writing(path, what, then):
    """An OSError inside becomes one line: what was being written to where, why, what to do, and
    `then` (a string, or a function giving one at that moment: where the run stands and how to go
    on). The temp files of write_atomic are gone by then."""
    try:
        yield
    except OSError as e:
        code = e.errno
        if code is None and _free_bytes(path) < 2 ** 20:   # numpy's tofile says only "N requested and M written"
            code = errno.ENOSPC
        why, fix = DISK.get(code, (e.strerror or str(e) or type(e).__name__, 'fix that'))
        # the folder to fix: the one a refused open or mkdir names (a parent, for a run dir not made yet)
        folder = os.path.dirname(e.filename if isinstance(e.filename, str) else path) or '.'
        then = then() if callable(then) else then
        raise SystemExit(f"cannot write {what} to {path}: {why}; {fix.format(dir=folder)}"
                         + (f", then {then}" if then else '')) from None


def _free_bytes(path):
    """Free bytes on the file system that holds path (or its nearest existing parent)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free


def check_writable(folder, what, then):
    """Create and remove a file in `folder` (or, until it exists, in the folder it will be made
    in): a read-only mount or a permission shows up before any work is spent, not when the result
    is written."""
    near = folder
    while near and not os.path.isdir(near):
        near = os.path.dirname(near)
    probe = os.path.join(near or '.', f'.write_check.{os.getpid()}.tmp')
    with writing(os.path.join(folder, what), what, then):
        with open(probe, 'wb'):
            pass
        os.remove(probe)


# -----------------------------------------------------------------------------
# one process per run dir

class Held(Exception):
    """The run dir is owned by another live process: str() is 'process <pid>', pid its pid."""

    def __init__(self, owner):
        self.pid = owner[0] if owner else '?'
        elsewhere = owner and owner[1] != socket.gethostname()
        super().__init__(f"process {self.pid}" + (f" on {owner[1]}" if elsewhere else ''))


def _owner(fd):
    """(pid, host) from a lock file's text, or None for an empty one."""
    text = os.pread(fd, 200, 0).decode(errors='replace').split()
    return (text + [''])[:2] if text else None


def busy(run_dir):
    """Held(owner) when a live process owns run_dir (its lock file flocked), else None; takes nothing."""
    try:
        fd = os.open(os.path.join(run_dir, LOCK), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return Held(_owner(fd))
    except OSError:            # a file system without flock: nothing to tell
        return None
    finally:
        os.close(fd)


def _claim(fd):
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)


def _same_file(fd, path):
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class DirLock:
    """Owns a run dir while this process lives: an flock on <run dir>/owner.lock, which holds the
    owner's pid. The kernel drops an flock when its process ends, however it ends, so the lock file
    a killed process leaves behind is stale and is taken over with a note. A trainer started by
    ablate.py is handed ablate.py's lock (child) instead of taking its own: the lock then lasts
    until both have ended, so a rerun never starts a second trainer beside one still stopping.
    Raises Held when a live process owns the dir."""

    def __init__(self, run_dir, note=print):
        self.path, self.fd, self.owned = os.path.join(run_dir, LOCK), None, True
        handed = os.environ.pop('RUNDIR_LOCK_FD', None)
        if handed and _same_file(int(handed), self.path):
            self.fd, self.owned = int(handed), False         # ablate.py unlinks it once this process ends
            _claim(self.fd)
            HELD.add(self)
            return
        self.made = not os.path.isdir(run_dir)
        os.makedirs(run_dir, exist_ok=True)
        while self.fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _owner(fd)
                os.close(fd)
                raise Held(owner) from None
            except OSError as e:    # a file system without flock (some cluster mounts): go on unlocked, and say so
                os.close(fd)
                note(f"note: cannot lock {self.path} ({e.strerror}): nothing stops a second process in this run dir")
                self.owned = False
                return
            if _same_file(fd, self.path):
                self.fd = fd
            else:                   # its last owner unlinked it between our open and our flock: lock the new one
                os.close(fd)
        stale = _owner(self.fd)
        if stale:
            note(f"took over {self.path} from process {stale[0]}, which ended without releasing it")
        for name in os.listdir(run_dir):    # temp files of a process killed mid-write: only an owner writes here
            if name.endswith('.tmp'):
                os.remove(os.path.join(run_dir, name))
        _claim(self.fd)
        HELD.add(self)

    def child(self):
        """Popen's arguments (env entries, pass_fds) that hand this lock to a child and tie the
        child's life to this process (die_with_parent)."""
        env = {'RUNDIR_PARENT_PID': str(os.getpid())}
        if self.fd is None:
            return env, ()
        return env | {'RUNDIR_LOCK_FD': str(self.fd)}, (self.fd,)

    def release(self):
        if self.fd is None:
            return
        if self.owned:
            with contextlib.suppress(OSError):
                os.remove(self.path)
            if self.made:           # a refused run leaves no empty run dir behind
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.dirname(self.path))
        os.close(self.fd)
        self.fd = None
        HELD.discard(self)


@atexit.register
def release_all():
    for lock in list(HELD):
        lock.release()


def leave(code):
    """End the process now with exit code `code`, skipping the interpreter's teardown (os._exit), after the part
    of it that matters here: every run lock released, stdout and stderr flushed."""
    release_all()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@atexit.register
def exiting():      # (atexit runs last-registered first: this before release_all)
    STOP['exiting'] = True


def own(run_dir):
    """Take run_dir for this process (a DirLock), or exit in one line naming the process that has it."""
    with writing(os.path.join(run_dir, LOCK), 'the lock file', "start again (or choose another --out_dir)"):
        try:
            return DirLock(run_dir)
        except Held as e:
            raise SystemExit(f"{run_dir} is in use by {e} (see {run_dir}/{LOCK}): wait for it to end, or stop it "
                             f"(kill {e.pid}) and rerun this command") from None


def make_once(folder, done, make, note=print):
    """make() unless done(), one process at a time: a second process that finds `folder` locked
    (two grids, or two runs, generating one corpus) waits for the first, then finds it done."""
    lock, waited = None, False
    while lock is None:
        try:
            lock = DirLock(folder, note)
        except Held as e:
            if not waited:
                note(f"waiting for {e}, which is writing {folder}")
            waited = True
            time.sleep(2)
    try:
        if not done():
            make()
    finally:
        lock.release()


# -----------------------------------------------------------------------------
# signals: a trainer ends with its ablate.py; SIGINT and SIGTERM end a script with one line

def die_with_parent():
    """In a trainer that ablate.py started (RUNDIR_PARENT_PID): end when ablate.py ends, SIGKILL
    included, which ablate.py cannot pass on. On Linux the kernel sends SIGTERM when the parent
    dies (prctl PR_SET_PDEATHSIG); elsewhere a thread watches the parent pid."""
    parent = int(os.environ.pop('RUNDIR_PARENT_PID', 0))
    if not parent:
        return
    try:
        ok = ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM) == 0   # 1 = PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        ok = False
    if not ok:
        def watch():
            while os.getppid() == parent:
                time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGTERM)
        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent:      # it ended before the link was made
        os.kill(os.getpid(), signal.SIGTERM)


def exit_on_signals(standing):
    """SIGINT (Ctrl-C) and SIGTERM end the script with exit code 128 + the signal (130, 143) and one
    line on stderr, standing(): where the run stands and the command that continues it (None: say
    nothing). No traceback; finally blocks and atexit still run, so temp files go and locks are released.
    The handler raises SystemExit where the signal lands and keeps the signal: code that swallows the
    exit there (torch's evaluation of a compiled graph's guards does) ends the script at its next
    stop_if_asked(), between two steps. A second signal, or one while the script exits, ends the process
    at once (os._exit: a kill, which every file this repo writes survives)."""
    def handler(signum, frame):
        first = STOP.get('signum') is None
        STOP.setdefault('signum', signum)
        line = standing() if first else None
        if line:   # on a line of its own: a progress bar may hold the current one
            print(f"\n{signal.Signals(signum).name}: {line}", file=sys.stderr, flush=True)
        if not first or STOP.get('exiting'):   # raised inside atexit, an exit prints 'Exception ignored'
            os._exit(128 + STOP['signum'])
        raise SystemExit(128 + signum)

    def uncaught(kind, value, tb):
        # the SystemExit raised where the signal landed can come back as another exception: Python wraps one
        # raised in a class's __set_name__ in a RuntimeError (torch importing its compiler, while a Ctrl-C lands).
        # That is still the stop: its line was said, so end as it would have (the lock released, then 128 + signal)
        if STOP.get('signum') is None:
            return sys.__excepthook__(kind, value, tb)
        leave(128 + STOP['signum'])
    sys.excepthook = uncaught
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, handler)


def stop_if_asked():
    """End the script (exit 128 + the signal) if exit_on_signals took a signal whose SystemExit was swallowed
    where it landed; its line was said then. Call it between units of work (a training step, a run)."""
    if STOP.get('signum') is not None:
        raise SystemExit(128 + STOP['signum'])
