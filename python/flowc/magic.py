"""IPython magics: `%flowc_watch MODEL [NAME] [--opt-level N] [--target T]
[--precision P] [--thin]` compiles MODEL now and again after every save, in
a background thread, and binds NAME (default: the model's stem) in the
user's namespace to the newest Artifact; `%flowc_unwatch [NAME]` stops one
watch (or all)."""
import os
import pathlib
import shlex
import threading

from . import errors
from ._compile import compile as compile_model

POLL_SECONDS = 0.1


def _signature(path):
    """What changes when an editor saves: inode (temp file + rename), size
    and mtime (truncate + write). None while the file is missing."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


class Watch:
    """Polls one model file; after a save has settled (the same signature on
    two polls in a row, so that a save in several steps compiles once, in
    its final state), compiles it and binds the artifact. A broken save
    prints its error and keeps the last good artifact bound."""

    def __init__(self, shell, path, name, options, out=print):
        self.shell = shell
        self.path = pathlib.Path(path).absolute()
        self.name = name
        self.options = options
        self.out = out
        self.compiles = 0
        self.errors = 0
        self.last_error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"flowc-watch-{name}",
                                        daemon=True)

    def start(self):
        self._thread.start()
        return self

    def __repr__(self):
        state = "watching" if self._thread.is_alive() else "stopped"
        return (f"<flowc watch: {state} {self.path} as `{self.name}`: {self.compiles} compiles, "
                f"{self.errors} errors>")

    def stop(self, wait=True):
        self._stop.set()
        if wait and self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=600)

    def _compile(self):
        try:
            artifact = compile_model(self.path, progress=False, **self.options)
        except errors.FlowcError as error:
            self.errors += 1
            self.last_error = error
            self.out(f"flowc: {self.path.name}: {error.kind}: {error.message} "
                     f"(keeping the last good `{self.name}`)")
            return
        self.compiles += 1
        self.shell.user_ns[self.name] = artifact
        result = artifact.result
        how = ("cache hit" if result.get("cache_hit") else
               f"{result.get('kernels_compiled', 0)} kernels compiled, "
               f"{result.get('kernels_reused', 0)} reused")
        self.out(f"flowc: {self.name} = {self.path.name} ({how}, "
                 f"{result.get('seconds', 0):.2f} s)")

    def _loop(self):
        compiled = _signature(self.path)
        self._compile()
        seen = compiled
        while not self._stop.wait(POLL_SECONDS):
            current = _signature(self.path)
            if current is None or current == compiled:
                seen = current
                continue
            if current != seen:
                # Still being written: wait for it to settle.
                seen = current
                continue
            compiled = current
            self._compile()


class _Magics:
    def __init__(self, shell):
        self.shell = shell
        self.watches = {}

    def watch(self, line):
        words = shlex.split(line)
        options, positional = {}, []
        flags = {"--opt-level": ("opt_level", int), "--target": ("target", str),
                 "--precision": ("precision", str), "--timeout": ("timeout", float)}
        i = 0
        while i < len(words):
            word = words[i]
            if word == "--thin":
                options["thin"] = True
            elif word in flags:
                if i + 1 == len(words):
                    raise errors.InvalidModel(f"%flowc_watch: {word} needs a value")
                key, kind = flags[word]
                options[key] = kind(words[i + 1])
                i += 1
            elif word.startswith("--"):
                raise errors.InvalidModel(f"%flowc_watch: unknown option {word} (known: "
                                          f"{', '.join(sorted([*flags, '--thin']))})")
            else:
                positional.append(word)
            i += 1
        if not 1 <= len(positional) <= 2:
            raise errors.InvalidModel("usage: %flowc_watch MODEL [NAME] [--opt-level N] "
                                      "[--target T] [--precision P] [--thin]")
        path = pathlib.Path(os.path.expanduser(positional[0]))
        if not path.exists():
            raise errors.NotFound(f"%flowc_watch: cannot read model '{positional[0]}': no "
                                  "such file", kind="not_found", file=str(path.absolute()))
        name = positional[1] if len(positional) == 2 else path.stem
        if not name.isidentifier():
            raise errors.InvalidModel(f"%flowc_watch: '{name}' is not a Python name; give "
                                      "one: %flowc_watch MODEL NAME")
        if name in self.watches:
            self.watches.pop(name).stop()
        self.watches[name] = Watch(self.shell, path, name, options).start()
        return self.watches[name]

    def unwatch(self, line):
        names = shlex.split(line) or list(self.watches)
        for name in names:
            if name not in self.watches:
                raise errors.NotFound(f"%flowc_unwatch: nothing is watched as '{name}' "
                                      f"(watched: {', '.join(self.watches) or 'nothing'})",
                                      kind="not_found")
            self.watches.pop(name).stop()


_registered = {}


def register(shell):
    magics = _Magics(shell)
    _registered[id(shell)] = magics
    shell.register_magic_function(magics.watch, "line", "flowc_watch")
    shell.register_magic_function(magics.unwatch, "line", "flowc_unwatch")


def unregister(shell):
    magics = _registered.pop(id(shell), None)
    if magics:
        magics.unwatch("")
