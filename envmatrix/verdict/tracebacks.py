"""Exceptions rebuilt from a log: each raised exception with its type, its message and its frames, each frame with the
installed distribution its file belongs to, so that rules can judge where a failure was raised and which package called
into which, whatever the message says.

Lines arrive cleaned (lines.py) with their stream; each stream (a rank, a worker) keeps its own traceback under
construction, so ranks that print at the same time do not mix. The forms read: CPython's `Traceback (most recent call
last):` with `File "…", line N, in f` frames, chained exceptions (`The above exception was the direct cause…`, `During
handling…`), `Exception ignored in:` (teardown noise, marked), faulthandler's `Fatal Python error:` dumps (most recent
call first), rich's boxed frames (`path.py:891 in f`), pytest's failure reports (`path.py:891: in f`, `E   Type: …`),
exception lines without a traceback, and wrapped types
(`RayTaskError(OutOfMemoryError)`). A message goes on over the lines after its exception line until a blank line or the
next structure (NCCL's `Last error:` detail, a compiler's diagnostics).

Bounded: MAX_EXCEPTIONS exceptions (the first ones and the last ones: a failure is usually at the end of a log), MAX_FRAMES
frames each, MAX_VALUE characters of message.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..facts.modules import distribution, known_import, stack_package
from .lines import Logical

MAX_EXCEPTIONS = 64
MAX_FRAMES = 128
MAX_VALUE = 2000
MAX_VALUE_LINES = 16

_FRAME = re.compile(r'File "(?P<path>[^"\n]{1,1000})", line (?P<line>\d+),? in (?P<func>\S{1,200})')
#: A frame's file as rich and pytest print it, without quotes.
_PY_PATH = r"(?P<path>(?:[A-Za-z]:)?[\w./\\~-]{1,1000}\.py)"
_RICH = re.compile(_PY_PATH + r":(?P<line>\d+)?:?(?:\s+in\s+(?P<func>[\w<>.]{1,200}))?$")
#: pytest's report of a failure: its frames are `path.py:1619: in func` (read as rich's), its exception and message lines
#: carry an `E` and spaces before them (`E   AttributeError: …`).
_PYTEST_E = re.compile(r"E {2,}(?=\S)|E\t+(?=\S)")
#: pytest's long report ends a failure with the raising frame's place and the exception's type (`module.py:1736: TypeError`),
#: after the `E` lines: that is the innermost frame of the exception just read.
_PYTEST_AT = re.compile(_PY_PATH + r":(?P<line>\d+): (?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)$")
#: A frame line cut before its `File "` (an excerpt that starts mid-line): `/trl/trainer/grpo_trainer.py", line 269, in __init__`.
_CUT_FRAME = re.compile(r'(?P<path>[^"\s]{0,1000}[/\\][^"\s/\\]{1,200}\.py)", line (?P<line>\d+),? in (?P<func>\S{1,200})$')
#: IPython's frame (`/usr/lib/python3/dist-packages/peft/peft_model.py in <module>`, a notebook's `[path](url) in f`, a path
#: the user cut to start inside the environment, `lib/python3.8/site-packages/…`), and
#: the numbered source lines under it (`---> 38 from transformers import …`).
_IPYTHON = re.compile(
    r"\[?(?P<path>(?:[A-Za-z]:|~)?[/\\][^\s\[\]()]{1,1000}\.py|<ipython-input-[\w-]{1,80}>"
    r"|[\w.-]{1,200}(?:[/\\][\w.-]{1,200}){0,8}[/\\](?:site|dist)-packages[/\\][^\s\[\]()]{1,1000}\.py)\]?(?:\([^)\s]{0,400}\))?"
    r"\s+in\s+(?P<func>[\w<>.]{1,200}|<cell line: \d+>)(?:\(.*\))?$"  # a notebook cell (`<ipython-input-11-…>`) too
)
#: Colab's fold of the frames between the user's cell and the last library frames (`8 frames`): the frames there are not
#: printed, so the frame above it did not call the one below directly.
_HIDDEN = re.compile(r"\d{1,4} frames?")
#: IPython 8's traceback: its header (`TypeError    Traceback (most recent call last)`), a notebook cell's frame (`Cell In[38],
#: line 2`: the user's code) and a file's (`File /…/trainer.py:123, in Trainer.__init__(self, …)`).
_IPYTHON_HEAD = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*\s{2,}Traceback \(most recent call last\)")
_IPYTHON_CELL = re.compile(r"Cell In\s?\[\d*\],\s*line (?P<line>\d+)")
_IPYTHON_FILE = re.compile(r"File (?P<path>(?:[A-Za-z]:|~)?[^\s,]{0,1000}\.py):(?P<line>\d+)(?:, in (?P<func>[\w<>.]{1,200}))?")
#: A lazy module's wrapper (transformers' `_LazyModule`): its message's next line is the inner error, raised importing MODULE.
#: transformers' lazy-import wrapper, which names the module whose import failed (its words may wrap over two lines).
#: A plugin loader's wrapper with its cause after a colon (napari's npe2: `Failed to import command at
#: 'micro_sam.sam_annotator.annotator_3d:Annotator3d': module 'torch.library' has no attribute 'register_fake'`).
_IMPORT_FAILED = re.compile(r"Failed to import (?:\w+ )?(?:at |from )?['\"](?P<module>[A-Za-z_][\w.]*)(?::[\w.]+)?['\"]\s*:\s+")
LAZY = re.compile(r"Failed to import (?P<module>[A-Za-z_][\w.]*)\s+because\s+of\s+the\s+following\s+error")
#: Library exception types that subclass a builtin one and stand in for it where they are raised: torch < 1.8's
#: `Module.__getattr__` raised `ModuleAttributeError(AttributeError)`; a rule on the builtin type must match them too.
_BUILTIN_BASE = {"ModuleAttributeError": "AttributeError"}

#: An AttributeError's message (a name a module, class or object lacks), as a lazy-import wrapper prints it under its line.
_INNER_ATTRIBUTE = re.compile(r"(?:module '?[\w.]+'?|'?[A-Za-z_]\w*'? object|type object '\w+') has no attribute '?\w+'?\.?\s*$")
_IPYTHON_SOURCE = re.compile(r"(?P<arrow>-*>)?\s*\d{1,6}\s(?P<source>.*)$")
_RICH_TAIL = re.compile(r"(?P<line>\d+) in (?P<func>[\w<>.]{1,200})$")
#: An exception line: a dotted name, optionally wrapping another (`RayTaskError(OutOfMemoryError)`), then `: message`
#: or nothing. Whether a name is an exception type is decided by `_is_exception`.
_RAISED = re.compile(
    r"(?P<type>(?:[A-Za-z_]\w{0,80}\.){0,8}[A-Za-z_]\w{0,80})(?:\((?P<inner>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\))?"
    r"(?::\s?(?P<value>.*)|\((?P<repr>[\"'].*[\"'])\)[`'\".]*\s*|\(\)|$)"  # a repr may close a quote: `Error("…")`
)
#: What an exception type's name ends in (`NotFound`, `Conflict`: pkg_resources' `DistributionNotFound`, `VersionConflict`;
#: triton's `OutOfResources`).
_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt", "Failed", "Failure", "Fault", "Abort", "Timeout", "NotFound", "Conflict", "OutOfResources")
_TRACEBACK = "Traceback (most recent call last)"
_CAUSE = ("The above exception was the direct cause of the following exception", "During handling of the above exception, another exception occurred")
_IGNORED = "Exception ignored in"
#: An exception type glued to the end of another process's text (ranks printing into one console without line ends):
#: `…param.ds_summary()AssertionError`, `…cuda()RuntimeError: message`.
_GLUED = re.compile(r"(?<=[)\]'\"])(?P<type>(?:[A-Za-z_]\w{0,80}\.){0,8}[A-Z]\w{0,80}(?:Error|Exception))(?::\s?(?P<value>.*))?$")
#: An exception named by its module path inside a sentence (`请问有人遇到 triton.runtime.errors.OutOfResources: out of …`, `I
#: get torch.cuda.OutOfMemoryError: CUDA out of memory`): a dotted type is no word of prose, so the rest is its message.
_QUALIFIED = re.compile(r"(?<![\w.])(?P<type>(?:[a-z_]\w{0,40}\.){1,6}[A-Z]\w{0,80}):[ \t]+(?P<value>\S.*)$")
#: An exception written right after Chinese or Japanese prose, with no space (`所以报出TypeError: f() got an unexpected …`).
_CJK_TYPED = re.compile(r"(?<=[\u3000-\u30ff\u4e00-\u9fff\uff00-\uffef])(?P<type>[A-Z]\w{0,80}(?:Error|Exception)):[ \t]*(?P<value>\S.*)$")
#: A shell's prompt before a command (`PS C:\Users\me> pip install …`, `user@host:~/x$ python …`, `(venv) $ …`): the
#: user's next command, which ends the message printed above it.
_PROMPT = re.compile(r"(?:\([\w.-]+\)\s*)?(?:PS [A-Za-z]:\\[^>\n]*>|[\w.-]+@[\w.-]+:[^$#\n]*[$#]|[$#])\s+\S")
#: A frame's source line that raises: what a traceback cut before its exception line was about to print.
_RAISE = re.compile(r"raise\s+(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)\((?P<value>.*)$")
#: Python's ImportError message printed alone (no type, no traceback: a launcher or a user's quote kept only the message):
#: it is that ImportError, marked `bare`.
_BARE_IMPORT = re.compile(r"cannot import name '?\w+'? from '?[A-Za-z_][\w.]*'?(?:\s*\([^)\n]*\))?\s*$")
#: The same message inside a wrapper's or a user's sentence (`Error loading module X: cannot import name …`, `报错"ImportError:
#: cannot import name …"`, `Code error: cannot import name ‘X’ from ‘m’. I checked …`), in any quotes; `from` may be cut.
_EMBEDDED_IMPORT = re.compile(
    r"(?<![A-Za-z0-9_.])[Cc]annot import name [`'‘’\"]?(?P<name>\w+)[`'‘’\"]?(?: from [`'‘’\"]?(?P<mod>[A-Za-z_]\w*(?:\.\w+)*)[`'‘’\"]?"
    r"(?P<path>\s*\([^)\n]{1,400}\))?)?"
)


#: Python's refusal of too many positional arguments (with keyword-only ones passed too: `melspectrogram() takes 0
#: positional arguments but 1 positional argument (and 1 keyword-only argument) were given`), for the patterns below and
#: boundary.py's.
TAKES = r"takes (?:from )?\d+(?: to \d+)? positional arguments? but \d+(?: positional arguments?)?(?: \(and \d+ keyword-only arguments?\))? (?:were|was) given"
#: Python's TypeError over a call's arguments, printed without its type by a logger or a wrapper (`str(e)`) or in a user's
#: sentence (`The error was GRPOTrainer._get_train_sampler() takes 1 positional argument but 2 were given.`).
_EMBEDDED_CALL = re.compile(
    r"(?<![A-Za-z0-9_.])[A-Za-z_][A-Za-z0-9_.]{0,200}\(\) (?:got an unexpected keyword argument ['‘’]\w{1,200}['‘’]"
    r"|" + TAKES + r"|missing \d+ required (?:keyword-only |positional )?arguments?:(?: '\w{1,200}'(?:(?:,| and) '\w{1,200}'){0,20}|[ \t]*$)"
    r"|got multiple values for (?:keyword )?argument '\w{1,200}')"
    # a server's answer that passes the TypeError on without the callable (`{'message': "Unexpected keyword argument 'x'"}`)
    r"|(?<![A-Za-z0-9_.])[Uu]nexpected keyword argument '\w{1,200}'"
)


#: An attribute refusal printed without its type, alone or inside a sentence: a class-like name (a quoted object as users
#: paste it, `'LLMEngine' object has no attribute 'x'`, or a CamelCase name as transformers' tokenizer prints it,
#: `Qwen2TokenizerFast has no attribute tokenizer`), or a module (ComfyUI's `Cannot import X module for custom nodes: module
#: 'torch.amp' has no attribute 'custom_fwd'`).
_EMBEDDED_ATTRIBUTE = re.compile(
    r"(?:(?<![A-Za-z0-9_.'])(?:module '[A-Za-z_][\w.]{0,200}'|[A-Z]\w{0,200}[a-z]\w{0,200})|(?<![0-9_.'])'[A-Za-z_][\w.]{0,200}' object)"
    r" has no attribute '?\w{1,200}'?"  # a quoted object glued to a label (`PhiPrompt'DynamicCache' object has no …`) too
)


#: Python's ModuleNotFoundError printed without its type, alone or at the end of a sentence (not a warning that goes on:
#: `No module named 'triton'; using the slow path`).
_EMBEDDED_MODULE = re.compile(  # at the line's end (`…'??????` too), or in quotes the prose goes on after (`the error "No module …" at`)
    r"(?<![A-Za-z0-9_.])[Nn]o module named '[A-Za-z_][\w.]{0,200}'(?=[`'\")\].*_\s?？]*$|[\"“”`]\s)"
)
#: A module's attribute error as a user pasted it without its `module` (`'transformers.models.x.modeling_x' has no
#: attribute '_flash_attention_forward'`): a quoted dotted path of lower-case names is a module.
_EMBEDDED_MODULE_ATTRIBUTE = re.compile(r"(?<![\w.'])'(?P<module>[a-z_]\w*(?:\.[a-z_]\w*)+)' has no attribute '(?P<name>\w+)'")


#: transformers' generate refusing keywords, printed without its type or under a mistyped one (`valueError: …`).
_EMBEDDED_KWARGS = re.compile(r"The following `?model_kwargs`? are not used by the model: \[[^\]\n]{0,2000}\]?")


#: Python's NameError printed without its type, in any quotes (`name ‘PeftModel’ is not defined`).
_EMBEDDED_NAME = re.compile(r"(?<![A-Za-z0-9_.])name [`'‘’\"](?P<name>[A-Za-z_]\w{0,200})[`'‘’\"] is not defined")


#: pickle's lookup of a class a checkpoint names (`Can't get attribute 'DSC3k2' on <module 'ultralytics.nn.modules.block'
#: from '…'>`), as users quote it (the module's brackets dropped).
_EMBEDDED_UNPICKLED = re.compile(r"Can['’]t get attribute ['‘’](?P<name>\w+)['‘’] on <?module ['‘’](?P<module>[A-Za-z_][\w.]*)['‘’]")


def _embedded(text: str, in_traceback: bool) -> tuple[str, str, bool] | None:
    """(type, message, typed) of an exception's message printed inside other text (a wrapper's or a user's sentence,
    a logger's line) without its type, or None. `typed`: an ImportError whose `ImportError:` stands right before it
    behind a quote or a label. Attribute, module and name messages are not read inside a traceback (its own lines)."""
    if "import name" in text and (embedded := _EMBEDDED_IMPORT.search(text)):
        return "ImportError", _said(embedded), text[: embedded.start()].rstrip().endswith("ImportError:")
    if ("() " in text or "nexpected keyword" in text) and (keyword := _EMBEDDED_CALL.search(text)):
        return "TypeError", keyword.group(0), False  # a logger's `Engine loop error: f() got an unexpected keyword …`
    if "model_kwargs" in text and (kwargs := _EMBEDDED_KWARGS.search(text)):
        return "ValueError", kwargs.group(0), False  # `**valueError: The following `model_kwargs` …` as a user typed it
    if in_traceback:
        return None
    if "has no attribute" in text and "circular import" not in text and (attribute := _EMBEDDED_ATTRIBUTE.search(text)):
        return "AttributeError", attribute.group(0), False  # `提示Qwen2TokenizerFast has no attribute tokenizer`
    if "has no attribute" in text and (module := _EMBEDDED_MODULE_ATTRIBUTE.search(text)):
        return "AttributeError", f"module '{module.group('module')}' has no attribute '{module.group('name')}'", False
    if "o module named" in text and (missing := _EMBEDDED_MODULE.search(text)):
        return "ModuleNotFoundError", missing.group(0), False  # `No module named 'torchao.quantization.prototype'` alone
    if "t get attribute" in text and (unpickled := _EMBEDDED_UNPICKLED.search(text)):  # pickle's, without its type
        return "AttributeError", f"Can't get attribute '{unpickled.group('name')}' on <module '{unpickled.group('module')}'>", False
    if "is not defined" in text and (undefined := _EMBEDDED_NAME.search(text)):
        return "NameError", f"name '{undefined.group('name')}' is not defined", False  # Python's words, straight quotes
    return None


def _typed_inside(text: str, in_traceback: bool) -> re.Match[str] | None:
    """An exception, type and message, that starts inside a line rather than at its start: glued to another process's
    text, or (outside a traceback) named by its module path in a sentence, or written right after CJK prose."""
    if glued := _GLUED.search(text):
        return glued
    if in_traceback:
        return None
    if "." in text and (qualified := _QUALIFIED.search(text)) and _is_exception(qualified.group("type"), "", False):
        return qualified
    return _CJK_TYPED.search(text) if not text.isascii() else None


def _awaits_cause(value: str) -> bool:
    """Whether a message is a lazy-import wrapper's line that ends before its cause (`Failed to import X because of the
    following error (look up to see its traceback):`): pasted, its cause may stand after a blank line."""
    return "\n" not in value and value.rstrip().endswith(":") and LAZY.search(value) is not None


def _said(m: re.Match[str]) -> str:
    """An embedded import message as Python prints it: straight quotes, the path where one was printed, no prose after."""
    said = f"cannot import name '{m.group('name')}'"
    return said + (f" from '{m.group('mod')}'{m.group('path') or ''}" if m.group("mod") else "")


#: A message that starts with the exception it wraps (torch inductor's `LoweringException: ImportError: cannot import name
#: 'triton_key' from 'triton.compiler.compiler'`): the wrapped type is read as the one it stands for, its message as the value.
_WRAPS_BUILTIN = re.compile(r"(?P<type>ImportError|ModuleNotFoundError|AttributeError|TypeError|NameError):\s(?P<value>.*)", re.S)
#: A type that is only a word (`Error: ModuleNotFoundError: …`, a wrapper's or a user's label): where an exception line
#: follows it, that line is the exception (outside a traceback, where Python prints the type it raised).
_GENERIC = frozenset({"Error", "Exception"})
#: A short label a user wrote before an exception line (`error info: `, `Error: `, `got: `, or words that end in `error`:
#: `Raises the error `); what follows must name an exception type that says it is one (`…Error:`), so prose with a colon
#: is not read as one.
_LABEL = re.compile(
    r"(?:[A-Za-z][\w .-]{0,60}:\s+|[^\n]{0,200}?\b(?i:error|exception|message)\b(?:\s+(?i:is|was))?\s*[:(]?\s*"
    r"|[^\n]{0,200}?(?:报错|错误|异常|出错)[了是为]?\s*[:：]?\s*"  # the same label in Chinese (`设置后报错：`)
    r"|[^\n]{0,200}?\s(?=[`'\"]))"  # any sentence that quotes it (`… errors out with `ModuleNotFoundError: …``)
    r"[`'\"]?(?=(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::|\([\"']))"  # in quotes too, or as a repr: `Error("…")`
)
#: Python's own exception types, by their lower-cased names (a log pasted lower-cased keeps them recognisable).
_BUILTIN_TYPES = {n.lower(): n for n in dir(builtins) if n.endswith(("Error", "Exception"))}
_LOWER_TYPE = re.compile(r"(?<![A-Za-z0-9_.])(" + "|".join(sorted(_BUILTIN_TYPES, key=len, reverse=True)) + r"):")
#: The actor a remote call ran in, which an actor framework puts before the message (xoscar's `[address=…, pid=…]`).
_ACTOR = re.compile(r"^\[(?:address|actor|pid|node|worker)=[^\]\n]{0,200}\]\s*")
#: A line of code (`self.model = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(**engine_args))`): what a frame's source
#: line looks like when an excerpt kept it without its `File` line.
_CODE = re.compile(r"^[\w.\[\]]+\s*(?:=|\()|^(?:return|yield|await)\s+\w")
#: An import statement (`from torch._six import container_abcs`).
_IMPORT_STATEMENT = re.compile(r"^from\s+[A-Za-z_][\w.]*\s+import\s+\(?\s*\w")
#: A progress bar (tqdm's): drawn between lines, never part of a message.
PROGRESS = re.compile(r"^\d{1,3}%\||\d(?:it/s|s/it)[\],]")
#: A C++ exception that ended the process (`terminate called after throwing an instance of 'c10::DistBackendError'`), its
#: message on the `what():` line after.
_CXX = re.compile(r"terminate called after throwing an instance of '(?P<type>[\w:<>]{1,200})'")
_WHAT = re.compile(r"^what\(\):\s*")
_FATAL = re.compile(r"Fatal Python error: (?P<value>.{1,400})")
#: Folders of a package's source checkout that hold scripts, not the package (`transformers/examples/…/run_clm.py` is the
#: user's script run from a checkout, not transformers' code).
_CHECKOUT_SCRIPTS = frozenset({"examples", "example", "benchmarks", "benchmark", "scripts", "tests", "test", "docs", "tools"})
_STDLIB = re.compile(r"[/\\]lib[/\\]python\d\.\d+[/\\](?!site-packages|dist-packages)|^<frozen |^<string>$")


@dataclass(frozen=True)
class Frame:
    """One frame: the file, line and function as printed, and the distribution its file belongs to ('' for the user's own
    code, 'python' for the standard library), with its module (`deepspeed.runtime.engine`)."""

    path: str
    line: int | None
    function: str
    package: str
    module: str

    def where(self) -> str:
        place = self.module or self.path.rsplit("/", 1)[-1]
        return f"{place}.{self.function}" if self.function and self.function != "<module>" else place


@dataclass(frozen=True)
class Raised:
    """One exception as the log shows it: type (and the type it wraps), message, frames outermost first, where it was
    printed, whether it was teardown noise (`Exception ignored in`), and the exception it was raised from (`cause`)."""

    type: str
    value: str
    frames: tuple[Frame, ...] = ()
    line_no: int = 0
    line: str = ""
    stream: str = ""
    inner: str = ""
    ignored: bool = False
    fatal: bool = False
    truncated: bool = False
    cause: Raised | None = None
    headless: bool = False  # its frames began without the `Traceback` header: outer frames may be cut from the excerpt
    source: str = ""  # the source line printed under its last frame (or right above it, where no frame was kept)
    above: str = ""  # the source line printed under the frame before the last (the call a pass-through frame passed on)
    bare: bool = False  # the message alone, without its type (`cannot import name 'X' from 'trl'`)
    importer: str = ""  # the module a lazy-import wrapper right above names as the one whose import failed
    hidden: tuple[int, str, str] | None = None  # frames a notebook folded: after how many printed ones, its words (`8 frames`), and
    # the source line of the frame above the fold (the call that ran the hidden ones)

    @property
    def types(self) -> tuple[str, ...]:
        """The type and the one it wraps, each dotted and by its last part (`torch.OutOfMemoryError`, `OutOfMemoryError`)."""
        names = [n for n in (self.type, self.inner) if n]
        short = [n.rsplit(".", 1)[-1] for n in names]
        return tuple(dict.fromkeys([*names, *short, *(_BUILTIN_BASE[n] for n in short if n in _BUILTIN_BASE)]))

    @property
    def raising(self) -> Frame | None:
        """The innermost frame: where the exception was raised."""
        return self.frames[-1] if self.frames else None

    @property
    def package(self) -> str:
        """The distribution the raising frame belongs to ('' when it is the user's code or there are no frames). The
        standard library's frames are looked through: an error raised in `multiprocessing` was raised by its caller; so
        are generic accessors (torch's `Module.__getattr__` raises for whoever asked a model for an attribute)."""
        for frame in reversed(self.frames):
            if not looked_through(frame):
                return frame.package
        return ""

    @property
    def caller(self) -> str:
        """The distribution that called into the raising one: walking out from the raising frame, the first frame of
        another distribution ('user' for the user's own code); '' when no frame belongs to another."""
        raising = self.package
        for frame in reversed(self.frames):
            if not looked_through(frame) and frame.package != raising:
                return frame.package or "user"
        return ""

    @property
    def chain(self) -> tuple[Raised, ...]:
        """This exception and those it was raised from, outermost first."""
        out: list[Raised] = []
        node: Raised | None = self
        while node is not None and len(out) < 16:
            out.append(node)
            node = node.cause
        return tuple(out)


#: Frames that raise on another's behalf: (module, function) of generic accessors, looked through like the standard library.
ACCESSORS = frozenset({("torch.nn.modules.module", "__getattr__")})


def looked_through(frame: Frame) -> bool:
    """A frame that raises on another's behalf (the standard library, a generic accessor): its caller raised."""
    return frame.package == "python" or (frame.module, frame.function) in ACCESSORS


def frame_of(path: str, line: int | None, function: str) -> Frame:
    """A frame with its distribution read from its path: the folder after `site-packages`/`dist-packages` names the
    import package; a source checkout is recognised by a folder named as a package of the training stack; the
    standard library is 'python'; anything else is the user's own code ('')."""
    parts = [p for p in re.split(r"[/\\]+", path) if p]
    module_parts: list[str] = []
    package = ""
    for i, part in enumerate(parts):
        if part in ("site-packages", "dist-packages") and i + 1 < len(parts):
            at = i + 2 if parts[i + 1].endswith(".egg") and i + 2 < len(parts) else i + 1  # `transformers-4.49.0-py3.9.egg/transformers/…`
            package, module_parts = parts[at], parts[at:]
    if not package:
        if _STDLIB.search(path):
            return Frame(path, line, function, "python", _module(parts[-1:]))
        for i in range(len(parts) - 2, -1, -1):
            if (stack_package(parts[i]) or _own_checkout(parts, i)) and parts[i + 1] not in _CHECKOUT_SCRIPTS:
                at = _outermost(parts, i)
                package, module_parts = parts[at], parts[at:]
                break
    if not package:
        return Frame(path, line, function, "", "")
    top = package.removesuffix(".py")
    return Frame(path, line, function, distribution(top), _module(module_parts))


def unarchived(folder: str) -> str:
    """A checkout's folder without the suffix a downloaded archive of a branch adds (`LLaMA-Factory-main` → `LLaMA-Factory`)."""
    return re.sub(r"-(?:main|master)$", "", folder)


def _own_checkout(parts: list[str], at: int) -> bool:
    """A known package's folder inside its own repository's checkout (`/workspace/AutoGPTQ/auto_gptq/…`,
    `/content/mmsegmentation/mmseg/…`): the folder above names the package (its letters, any case, `-main` and
    `-master` of a downloaded archive aside), so the code is that package's, run from source, not the user's (a user's
    `myproj/myproj/` stays the user's: only a package the facts know)."""
    if at == 0 or not known_import(parts[at]) or len(parts[at]) < 4:
        return False
    above = re.sub(r"[-_.]", "", unarchived(parts[at - 1])).lower()
    names = {re.sub(r"[-_.]", "", n).lower() for n in (parts[at], distribution(parts[at]))}
    return any(above == n or above.startswith(n) for n in names)


#: A folder that can be a Python package's (lower case, no dash: a checkout's own folder, `LLaMA-Factory`, is none).
_PACKAGE_DIR = re.compile(r"[a-z_][a-z0-9_]*")


def _outermost(parts: list[str], at: int) -> int:
    """The stack package a checkout's folder at `at` is a subpackage of (`/Verl/verl/verl/models/transformers/x.py` is
    verl's `verl.models.transformers`, not transformers): the outermost stack package reached through package-like
    folders; `at` itself where there is none."""
    found = at
    for j in range(at - 1, -1, -1):
        if not _PACKAGE_DIR.fullmatch(parts[j]) or parts[j] == "src":
            break
        if stack_package(parts[j]) and parts[j] != parts[found]:  # `/workspace/verl/verl/…`: the checkout holds verl
            found = j
    return found


def _module(parts: list[str]) -> str:
    if not parts:
        return ""
    last = re.sub(r"\.py[cd]?$", "", parts[-1])
    names = [*parts[:-1], last] if last != "__init__" else parts[:-1]
    return ".".join(names)


def _is_exception(name: str, inner: str | None, after_frames: bool) -> bool:
    """A dotted name is an exception type when it closes a traceback (any capitalised `Name: message` right after frames)
    or, on a line of its own, when its name says so (`…Error`, `…Exception`, `KeyboardInterrupt`, `SystemExit`, …).
    Warnings are never exceptions."""
    last = name.rsplit(".", 1)[-1]
    if last.endswith("Warning") or not last[:1].isupper():
        return False
    return after_frames or last.endswith(_SUFFIXES) or (inner or "").endswith(_SUFFIXES) or last == "StopIteration"


@dataclass
class _Stream:
    frames: list[Frame] = field(default_factory=list)
    in_traceback: bool = False
    after_frame: bool = False
    pending_path: str | None = None
    cause_next: bool = False
    ignored_next: bool = False
    fatal: str | None = None
    last: Raised | None = None
    value_lines: int = 0
    frame_line: int = 0  # the log line of the last frame read
    source: str = ""  # the source line printed under the last frame
    above: str = ""  # the source line printed under the frame before it
    logged: bool = False  # whether the last exception line came through a logger (its message's lines do too)
    announced: tuple[str, int] | None = None  # an ERROR record printed just before the traceback: its text and line
    ipython: bool = False  # the traceback is IPython's (numbered source lines under each frame)
    headless: bool = False  # frames read without a `Traceback` header before them
    code: tuple[str, int] | None = None  # the last line read that looks like code, not consumed otherwise, and its number
    first_line: int = 0  # the log line of the first frame of the traceback under construction
    hidden: tuple[int, str, str] | None = None  # frames a notebook folded (`8 frames`): after how many, its words, the source above
    wrapper: tuple[str, int] | None = None  # a lazy-import wrapper's line printed without its type: the module it names, its line


class Reader:
    """Feeds cleaned lines in order; collects the exceptions (bounded: the first and the last)."""

    def __init__(self) -> None:
        self.streams: dict[str, _Stream] = {}
        self.head: list[Raised] = []
        self.tail: list[Raised] = []
        self.seen = 0
        self.message_at: tuple[str, int] | None = None  # (stream, line) of the last line that was an exception's message
        self.line_no = 0  # the line being read

    def feed(self, logical: Logical, line_no: int) -> bool:
        """Read one line; True when it was part of a traceback or an exception (the scanner stops a region after a few
        lines that are not)."""
        self.line_no = line_no
        wrapped = self._wrapped(logical, line_no)
        if wrapped is not None:
            self._join(wrapped, logical.text, line_no)
            return True
        stream = logical.stream
        st = self.streams.setdefault(stream, _Stream())
        text = logical.text
        if text[:1] == "E" and (pytest_e := _PYTEST_E.match(text)):
            text = text[pytest_e.end() :]
        if PROGRESS.search(text):
            if self.message_at is not None and self.message_at[1] == line_no - 1:
                self.message_at = (self.message_at[0], line_no)  # a bar drawn inside a wrapped message does not end it
            return False  # a progress bar drawn between a message's lines: not part of it, and it does not end it
        if not text:
            if not (st.value_lines == 1 and st.last is not None and _awaits_cause(st.last.value)):
                st.value_lines = 0  # a blank line ends a message, except between a lazy wrapper's line and its cause
            if st.code is not None and st.code[1] == line_no - 1:
                st.code = (st.code[0], line_no)  # a code line pasted over a blank line and its exception is still its source
            return False
        if text.lstrip("`'\"").startswith(_TRACEBACK):  # also inside a quote a user pasted it in
            st.value_lines = 0
            st.frames, st.in_traceback, st.after_frame, st.fatal, st.headless = [], True, False, None, False
            st.hidden = None
            return True
        if text[:1].isupper() and _IPYTHON_HEAD.match(text):
            st.value_lines = 0
            st.frames, st.in_traceback, st.after_frame, st.fatal, st.headless, st.ipython = [], True, False, None, False, True
            st.hidden = None
            return True
        if text[:1] in "CF" and (m := _IPYTHON_CELL.match(text) or _IPYTHON_FILE.match(text)):
            st.value_lines, st.frame_line = 0, line_no
            path = m.groupdict().get("path") or "<notebook cell>"
            self._frame(st, frame_of(path, int(m.group("line")), m.groupdict().get("func") or "<module>"))
            st.after_frame, st.ipython = False, True
            return True
        if text.startswith(_CAUSE):
            st.value_lines, st.cause_next = 0, True
            return True
        if text.startswith(_IGNORED):
            st.value_lines, st.ignored_next = 0, True
            return True
        if cxx := _CXX.search(text):
            self._emit(st, Raised(cxx.group("type").replace("::", "."), "", (), line_no, text, logical.stream))
            st.value_lines, st.logged = 1, logical.logged
            return True
        if m := _FATAL.match(text):
            st.value_lines = 0
            st.fatal, st.frames, st.in_traceback = m.group("value").strip(), [], True
            self._emit(st, Raised("Fatal Python error", st.fatal, (), line_no, text, logical.stream, fatal=True))
            return True
        if text.startswith("File") and (m := _FRAME.match(text)):
            st.value_lines, st.frame_line = 0, line_no
            self._frame(st, frame_of(m.group("path"), int(m.group("line")), m.group("func")))
            return True
        if '.py"' in text and (m := _CUT_FRAME.match(text)):
            st.value_lines, st.frame_line = 0, line_no
            self._frame(st, frame_of(m.group("path"), int(m.group("line")), m.group("func")))
            return True
        if st.ipython and st.in_traceback and st.frames and _HIDDEN.fullmatch(text):
            st.hidden = (len(st.frames), text, st.source)
            return True
        if (".py" in text or "<ipython-input" in text) and (m := _IPYTHON.match(text)):
            st.value_lines, st.frame_line = 0, line_no
            self._frame(st, frame_of(m.group("path"), None, m.group("func")))
            st.after_frame, st.ipython = False, True
            return True
        if st.ipython and st.in_traceback and (m := _IPYTHON_SOURCE.match(text)):
            if m.group("arrow"):
                st.source = m.group("source").strip()
            return True  # (an IPython source line)
        if ".py:" in text and (at := _PYTEST_AT.match(text)) and self._pytest_at(st, at):
            return True
        if ".py:" in text and (rich := _RICH.search(text)) and ("/" in rich.group("path") or "\\" in rich.group("path")):
            if rich.group("func") or (rich.group("line") and text.endswith(":")):  # pytest's long report names no function
                self._frame(st, frame_of(rich.group("path"), int(rich.group("line") or 0) or None, rich.group("func") or ""))
            else:
                st.pending_path = rich.group("path")
            return True
        if st.pending_path and (m := _RICH_TAIL.match(text)):
            self._frame(st, frame_of(st.pending_path, int(m.group("line")), m.group("func")))
            st.pending_path = None
            return True
        if text.islower() and "error:" in text:  # a log pasted lower-cased: `valueerror: bfloat16 is only supported …`
            text = _LOWER_TYPE.sub(lambda t: _BUILTIN_TYPES[t.group(1)] + ":", text)
        m = _RAISED.fullmatch(text)
        after = st.in_traceback and bool(st.frames)
        generic = m is not None and m.group("type") in _GENERIC and not st.in_traceback
        if (m is None or generic or not _is_exception(m.group("type"), m.group("inner"), after)) and (label := _LABEL.match(text)):
            labelled = _RAISED.fullmatch(text[label.end() :])  # `error: AttributeError: …`: a user's label
            if not generic or (labelled is not None and _is_exception(labelled.group("type"), labelled.group("inner"), after)):
                text, m = text[label.end() :], labelled
        if m and _is_exception(m.group("type"), m.group("inner"), after):
            self._raise(st, m, text, line_no, logical.stream, logical.logged)
            if "Failed to import" in text:
                self._lazy_cause(st, line_no, logical.stream)
            return True
        if st.after_frame:
            st.after_frame, st.source = False, text  # the source line printed under a frame
            return True
        if inside := _typed_inside(text, st.in_traceback):
            self._raise(st, inside, inside.group(0), line_no, logical.stream, logical.logged)
            return True
        bare = "ImportError" if text.startswith("cannot import name") and _BARE_IMPORT.match(text) else ""
        typed = False
        if not bare and (embedded := _embedded(text, st.in_traceback)):
            typed, (bare, text) = embedded[0] == "ImportError" and embedded[2], embedded[:2]
        inner = not bare and _INNER_ATTRIBUTE.match(text) is not None
        # the wrapper's message right above (its lines included: wrappers nest, `Failed to import A …` / `Failed to import
        # B …`): the innermost names the module whose import failed. Read only for a line that may be its inner error.
        near = (bare or inner) and st.last is not None and (st.last.line_no >= line_no - 1 or self.message_at == (stream, line_no - 1))
        lazy = next(reversed(list(LAZY.finditer(st.last.value))), None) if near and st.last is not None else None
        if lazy and inner:
            bare = "AttributeError"  # the wrapper prints its inner error's message without the type: the message says it
        if bare:
            importer = lazy.group("module") if lazy else st.wrapper[0] if st.wrapper is not None and st.wrapper[1] == line_no - 1 else ""
            if importer and f"'{importer}'" in text:  # the wrapper names the very module that is missing: not its importer
                importer = ""
            self._emit(st, Raised(bare, text[:MAX_VALUE], (), line_no, text[:400], logical.stream, bare=not typed, importer=importer))
            st.value_lines, st.logged = 0, logical.logged
            return True
        if text.startswith(("^", "~")) or set(text) <= set("^~ "):
            return True  # the carets under a source line
        if st.value_lines and _PROMPT.match(text):
            st.value_lines = 0  # a shell's prompt: the user's next command, no line of the message
        if st.last is not None and 0 < st.value_lines < MAX_VALUE_LINES and logical.logged == st.logged:
            st.value_lines += 1
            last = st.last
            text = _WHAT.sub("", text)
            st.last = replace(last, value=(last.value + "\n" + text if last.value else text)[:MAX_VALUE])
            self._replace(last, st.last)
            self.message_at = (stream, line_no)
            return True
        self.code_above(logical, line_no)
        return False

    def _pytest_at(self, st: _Stream, at: re.Match[str]) -> bool:
        """pytest's `path.py:N: Type` right after the exception of that type: its innermost frame, added to it."""
        last = st.last
        if last is None or at.group("type").rsplit(".", 1)[-1] not in last.types or len(last.frames) >= MAX_FRAMES:
            return False
        st.last = replace(last, frames=(*last.frames, frame_of(at.group("path"), int(at.group("line")), "")))
        self._replace(last, st.last)
        st.value_lines = 0
        return True

    def _lazy_cause(self, st: _Stream, line_no: int, stream: str) -> None:
        """The cause a lazy-import wrapper prints on its own line (`RuntimeError: Failed to import transformers.trainer
        because of the following error (look up to see its traceback): cannot import name 'amp' from 'apex'`): read as
        that exception, imported by the module the wrapper names (on the next line it is read as any inner message)."""
        raised = st.last
        lazy = (LAZY.search(raised.value) or _IMPORT_FAILED.search(raised.value)) if raised is not None else None
        if raised is None or lazy is None:
            return
        cause = raised.value[lazy.end() :].split("\n", 1)[0]
        if (found := _embedded(cause, in_traceback=False)) is not None:
            kind, text, _ = found
            self._emit(st, Raised(kind, text[:MAX_VALUE], (), line_no, text[:400], stream, bare=True, importer=lazy.group("module")))

    def code_above(self, logical: Logical, line_no: int) -> None:
        """A line that looks like code and was read as nothing else: the source line of an exception printed right under
        it without its frame (an excerpt that kept two lines; an import statement at any indent: `from torch._six import
        container_abcs` over the ImportError that names no `from`); or a lazy-import wrapper's line without its type (`!!!
        Exception during processing !!! Failed to import X because of …`) over its cause."""
        if (logical.indent >= 2 and "(" in logical.text and _CODE.match(logical.text)) or _IMPORT_STATEMENT.match(logical.text):
            self.streams.setdefault(logical.stream, _Stream()).code = (logical.text, line_no)
        elif "Failed to import" in logical.text and (lazy := LAZY.search(logical.text)):  # a wrapper's line a logger printed untyped
            self.streams.setdefault(logical.stream, _Stream()).wrapper = (lazy.group("module"), line_no)

    def _wrapped(self, logical: Logical, line_no: int) -> str | None:
        """The stream whose message this line goes on with, when a terminal wrapped it: a line starting in lower case right
        under a message line, without the innermost prefix that line had (`(EngineCore pid=3) … (4.26 GiB KV cach` /
        `e is needed, …`; a launcher's own prefix, such as a rank's, is on both)."""
        at = self.message_at
        if at is None or at[1] != line_no - 1 or not logical.text[:1].islower() or logical.indent > 1:
            return None
        outer, inner = set(filter(None, logical.stream.split("/"))), set(filter(None, at[0].split("/")))
        return at[0] if outer < inner and self.streams[at[0]].last is not None else None

    def _join(self, stream: str, text: str, line_no: int) -> None:
        """A wrapped line's part of its stream's message (see `_wrapped`), joined without a line break."""
        st = self.streams[stream]
        last = st.last
        if last is not None:
            st.last = replace(last, value=(last.value + text)[:MAX_VALUE])
            self._replace(last, st.last)
        self.message_at = (stream, line_no)

    def announce(self, logical: Logical, line_no: int) -> None:
        """An ERROR-level log record printed just before a traceback: engines log what failed and then raise, so where the
        traceback is cut before its exception line, this record is what it raised."""
        self.streams.setdefault(logical.stream, _Stream()).announced = (logical.text[:MAX_VALUE], line_no)

    def _frame(self, st: _Stream, frame: Frame) -> None:
        if st.fatal is None and not st.in_traceback:
            st.frames, st.in_traceback, st.headless = [], True, True  # frames without a header (an excerpt that starts mid-traceback)
            st.first_line = self.line_no
        if len(st.frames) < MAX_FRAMES:
            if st.fatal is not None:
                st.frames.insert(0, frame)  # faulthandler prints the most recent call first
                if st.last is not None and st.last.fatal:
                    last = st.last
                    st.last = replace(last, frames=tuple(st.frames))
                    self._replace(last, st.last)
            else:
                st.frames.append(frame)
        st.after_frame, st.source, st.above = st.fatal is None, "", st.source

    def _raise(self, st: _Stream, m: re.Match[str], text: str, line_no: int, stream: str, logged: bool) -> None:
        cause = st.last if st.cause_next else None
        source = st.source if st.frames else st.code[0] if st.code is not None and st.code[1] == line_no - 1 else ""
        if not st.frames and stream and (cut := self.streams.get("")) is not None and cut.frames and cut.in_traceback and 0 < line_no - cut.frame_line <= 3:
            st.frames, cut.frames, cut.in_traceback, st.headless = cut.frames, [], False, True  # a cut frame line that lost its rank's prefix
        value = _ACTOR.sub("", (m.group("value") or (m.groupdict().get("repr") or "")[1:-1]).strip())[:MAX_VALUE]
        inner = m.groupdict().get("inner") or ""
        if not inner and (wrapped := _WRAPS_BUILTIN.match(value)):  # `LoweringException: ImportError: cannot import name …`
            inner, value = wrapped.group("type"), wrapped.group("value")
        raised = Raised(
            m.group("type"),
            value,
            tuple(st.frames),
            line_no,
            text[:400],
            stream,
            inner,
            ignored=st.ignored_next,
            cause=cause,
            headless=st.headless,
            hidden=st.hidden,
            source=source,
            above=st.above if st.frames else "",
        )
        st.frames, st.in_traceback, st.after_frame, st.cause_next, st.ignored_next, st.ipython = [], False, False, False, False, False
        st.hidden = None
        st.announced, st.source, st.above, st.code = None, "", "", None
        self._emit(st, raised)
        self._imported_by(cause, raised.frames, raised.value)
        st.value_lines, st.logged = 1, logged
        self.message_at = (stream, line_no)

    def _emit(self, st: _Stream, raised: Raised) -> None:
        st.last = raised
        self.seen += 1
        if len(self.head) < MAX_EXCEPTIONS // 2:
            self.head.append(raised)
        else:
            self.tail.append(raised)
            if len(self.tail) > MAX_EXCEPTIONS // 2:
                self.tail.pop(0)

    def _replace(self, old: Raised, new: Raised) -> None:
        for bucket in (self.tail, self.head):
            for i in range(len(bucket) - 1, -1, -1):
                if bucket[i] is old:
                    bucket[i] = new
                    return

    def raised(self) -> tuple[Raised, ...]:
        """The exceptions read, in the order printed (the first and the last MAX_EXCEPTIONS // 2 when there were more).
        A traceback cut before its exception line (an excerpt, a killed process) still says where it was: it is kept as an
        exception of unknown type (`truncated`)."""
        cut = []
        for name, st in self.streams.items():
            if not (st.in_traceback and st.frames and st.fatal is None):
                continue
            last = st.last
            if st.headless and last is not None and not last.frames and 0 < st.first_line - last.line_no <= 3:
                # the exception line pasted above its own traceback (a user's quote, then the trace): its frames
                self._replace(last, replace(last, frames=tuple(st.frames), headless=True))
                continue
            cut.append(self._cut(name, st))
            self._imported_by(st.last if st.cause_next else None, st.frames, "")
        return (*self.head, *self.tail, *cut)

    def _imported_by(self, cause: Raised | None, frames: Sequence[Frame], value: str) -> None:
        """An import error printed without frames that was the direct cause of an exception a lazy-import wrapper raised
        (diffusers' or transformers' `_get_module`, `Failed to import X because of the following error`): the module the
        wrapper was importing imported it (the wrapper's message names it; else the wrapper's own package)."""
        if cause is None or cause.frames or cause.importer or not {"ImportError", "ModuleNotFoundError"} & set(cause.types):
            return
        lazy = LAZY.search(value)
        wrapper = next((f.module for f in reversed(frames) if f.function == "_get_module" and f.package not in ("", "python") and f.module), "")
        module = lazy.group("module") if lazy else wrapper.split(".")[0]
        if module:
            self._replace(cause, replace(cause, importer=module))

    @staticmethod
    def _cut(name: str, st: _Stream) -> Raised:
        """A traceback whose exception line is missing; a `raise X("…")` under its last frame says what it raised, else the
        ERROR record printed just before the traceback (`announce`)."""
        raised = _RAISE.match(st.source)
        if raised is None and st.announced is not None:
            text, line_no = st.announced
            return Raised("", text, tuple(st.frames), line_no, text[:400], name, truncated=True)
        if raised is None:
            return Raised("", "", tuple(st.frames), st.frame_line, "(a traceback cut before its exception line)", name, truncated=True)
        value = raised.group("value").rstrip(")").strip().strip("\"'f")
        return Raised(raised.group("type"), value, tuple(st.frames), st.frame_line, st.source, name, truncated=True)
