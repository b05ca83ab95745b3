"""Scan a training log for failure signatures, trainer metrics and generated text, in linear time and bounded memory.

The log is read in 1 MiB chunks of whole lines as bytes and searched with Google's RE2 (google-re2, from
PyPI): an automaton-based engine whose time is linear in the input whatever the pattern, so no line
(`\\r`, repeated short tokens, a megabyte without a line end) can make a pattern backtrack; Python's `re`
with a literal prefilter would keep the backtracking risk in every pattern we add. Everything wanted is one
alternation searched in one pass (~300 MB/s here): each signature, fact and the first non-finite value
leave it once seen (only the first hit is kept), metric values after METRIC_VALUES_KEPT matches, and
generated-text candidates (id lists, special-token runs, word runs, lines labelled completion/output/…,
measured by garble.py) after GEN_BUDGET: the Python work per log is bounded whatever its size.
ANSI colour codes are removed only from the text quoted and judged (from the whole log they would halve the
speed); the patterns allow them where loggers put them (around a line, a level, an exception type).
`\\r`-redrawn progress bars, rank prefixes, non-UTF-8 bytes and terminal-wrapped phrases need no special
handling: the patterns do not depend on line structure.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, BinaryIO

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

from ..facts import errorcodes
from ..facts.enginefailures import FAILURES as ENGINE_FAILURES
from .garble import CHAR_RUN, garbled
from .lines import clean, unflatten
from .rules import Judged, judge
from .stated import HOW, Shown, Stated, closing, dist_of
from .stated import pattern as stated_pattern
from .tracebacks import PROGRESS as _PROGRESS
from .tracebacks import Raised, Reader

CHUNK = 1 << 20
MAX_LINE = 1 << 16  # a "line" longer than this is cut when quoted as evidence
EVIDENCE_CHARS = 400
METRIC_VALUES_KEPT = 64
GEN_BUDGET = 4096  # generated-text candidates measured per log
GEN_REGION = 1 << 14  # bytes of an id list followed across wrapped, prefixed lines
MAX_TAIL = 1 << 12  # how far past judged text a signature that starts inside it may reach
STRUCT_BUDGET = 1 << 20  # bytes of tracebacks read as structure from the head of a log; the tail is read apart
TAIL_BYTES = 1 << 20  # the end of a log, read as structure whatever the budget left (a failure is usually at the end)
REGION_BYTES = 256 << 10  # one traceback region at most
REGION_GAP = 3  # lines that are not a traceback's end a region (other ranks' lines in between are allowed up to this)
CODE_HITS = 64  # lines read for library error codes (the first ones: a code is printed where a failure starts)
HARMLESS_HITS = 4096  # lines a signature matched that say nothing failed (HARMLESS) passed over; then it is read no further
STATED_HITS = 256  # statements of installed packages read (versions listed, imports; the head of a log states them)
CALLS_SHOWN = 16  # classes the log's code constructs (`args = TrainingArguments(`) read, with the keywords they pass
CALL_BYTES = 4096  # how far a call's parentheses are followed over its lines
#: A line of code that constructs a class (`training_args = TrainingArguments(`, `>>> trainer = Trainer(amp_type='apex')`):
#: where an `__init__()` is printed without its class and no frame shows its call, the code the user pasted does.
_CALL_SHOWN = rb"(?m:^)[ \t>]*(?:[A-Za-z_][\w.\[\]]*[ \t]*=[ \t]*)?(?:[A-Za-z_]\w*\.)*[A-Z]\w*\("

#: RE2's memory for one compiled alternation: its default (8 MiB) is too small a DFA cache for every signature at once, and
#: a DFA out of memory falls back to the NFA, many times slower. 64 MiB is per pattern (a few are cached), not per log.
_OPTIONS = re2.Options()
_OPTIONS.max_mem = 64 << 20


def _nccl_failed_before(scan: LogScan, line_no: int) -> bool:
    """Whether NCCL logged a failure of its own (a network error, a timeout) on an earlier line: the first failure is the
    cause, and the CUDA calls that fail after it while NCCL tears down are its consequences."""
    return any(name.startswith("nccl_error:") and hit.line_no < line_no for name, hit in scan.hits.items())


_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_ANSI_END = re.compile(rb"\x1b\[[0-9;]*m$")

# name → pattern (RE2 syntax); names are `<outcome>:<variant>`, the most decisive variant of an outcome first
# (its hit is the evidence quoted). Variants cover the wordings of several releases and frameworks.
# Case matters: `--fault sigfpe` in a command line is not a SIGFPE. `\s` between words: terminal wrapping.
SIGNATURES: dict[str, str] = {
    "sigfpe:ucx": r"Caught signal 8\b",
    "sigfpe:elastic": r"Signal 8 \(SIGFPE\)",
    "sigfpe:torchrun": r"exitcode\s*:\s*-8\b",
    "sigfpe:interrupted": r"interrupted by signal 8: SIGFPE",
    "sigfpe:status": r"(?:exit|error|return)[ _]?(?:code|status)\s*[:=]?\s*-8\b|<Signals\.SIGFPE: 8>",
    "sigfpe:shell": r"(?i:floating point exception)|浮点数?例外",  # bash's, zsh's lower-case one, and bash's in a Chinese locale
    "sigfpe:name": r"SIGFPE\b",
    # (also the loader's versioned form: `symbol cudaFreeAsync version libcudart.so.11.0 not defined in file`)
    # (and as a user typed it, shortened, with a full-width colon, over a C++ name: `undefined sym：_ZN6caffe28TypeMeta…`)
    "import_abi:symbol": r"undefined(?: |%20)symbol:(?:\s|%20)*\S+|\bsymbol \S+ version \S+ not defined in file|undefined sym(?:bol)?\s*[:：]\s*_Z\w{8,}",
    "import_abi:glibc": r"GLIBC_[0-9.]+['’`]?\s+not found",  # a quote as typed or as a forum rendered it
    "import_abi:glibcxx": r"GLIBCXX_[0-9.]+['’`]?\s+not found",
    "import_abi:cxxabi": r"CXXABI_[0-9.]+['’`]?\s+not found",
    # xFormers' own notice that its compiled part does not load (built for another torch, CUDA or Python)
    "import_abi:xformers": r"xFormers can't load C\+\+/CUDA extensions",
    # a companion built for another torch (torchvision's own check of its CUDA build; its operators missing from this torch)
    "import_abi:companion": r"compiled with different CUDA (?:major )?versions|operator torchvision::\w+ does not exist"
    r"|Couldn't load custom C\+\+ ops",  # torchvision's own words for its extension that does not load with this torch
    # an extension built against another NumPy's C API (NumPy 2's own notice, wrapped as it prints it; the older ABI checks)
    "import_abi:numpy": r"compiled using NumPy 1\.x cannot be run in\s+NumPy 2|numpy\.dtype size changed, may indicate binary incompatibility"
    r"|module compiled against (?:ABI|API) version 0x[0-9a-f]+ but this version of numpy is 0x[0-9a-f]+|_ARRAY_API not found",
    # Cython's check of a compiled type's size against the one the extension was built with (`numpy.ndarray size changed`,
    # any extension type): built against another release of the library it links
    "import_abi:cython_size": r"\b[A-Za-z_][\w.]* size changed, may indicate binary incompatibility",
    # torch refusing a second registration of an operator under another schema: two builds of one library (an extension
    # built for another torch, two torch installs) loaded into one process
    "import_abi:registered_twice": r"Tried to register (?:multiple operators|an operator) [^\n]{0,300}?with the same name and (?:the same )?overload name",
    "import_abi:missing_lib": r"lib[\w+-]+\.so(?:\.\d+)*: cannot open shared object file",
    # Windows' and macOS's loaders refusing a compiled extension, quoted without the exception's type (`DLL load failed while
    # importing flash_attn_2_cuda`, `dlopen(…_sentencepiece.cpython-310-darwin.so, 0x0002): Library not loaded: @rpath/…`)
    # a runtime's own loader naming the library it could not load (CTranslate2: `Library cublas64_12.dll is not found or
    # cannot be loaded`)
    "import_abi:lib_load": r"Library [\w.+-]+\.(?:dll|so(?:\.\d+)*|dylib) is not found or cannot be loaded",
    "import_abi:dll": r"DLL load failed while importing \w+|LoadLibrary failed with error \d+"
    # Windows' loader under torch and Paddle (`OSError: [WinError 126] … Error loading "…\\torch\\lib\\c10.dll"`, `The
    # third-party dynamic library (cudnn64_7.dll) that Paddle depends on is not configured correctly. (error code is 126)`)
    r"|\[WinError 126\]|Error loading \"[^\"\n]{1,300}\.dll\"|third-party dynamic library \([^)\n]{1,80}\) that \w+ depends on is not configured correctly"
    # the loader out of static TLS space for a library loaded late (libgomp under torch_npu): no memory is short
    r"|cannot allocate memory in static TLS block"
    r"|\bdlopen\([^)\n]{1,400}\): (?:Library not loaded|Symbol not found|[^\n]{0,200}incompatible architecture)",
    # TensorFlow's and JAX's check of the cuDNN loaded against the one they were built with
    "import_abi:cudnn_version": r"Loaded runtime CuDNN library: [\d.]+ but source was compiled with:? [\d.]+",
    # an architecture the installed transformers does not know: the probe's wording, then transformers' own
    "unknown_model:probe": r"model_type '[\w.-]+' \([^)]*\) is not known to transformers [\w.]+",
    # (its backticks dropped where a page rendered them as code)
    "unknown_model:auto": r"has model type [`'\"]?[\w.-]+[`'\"]? but Transformers does not recognize this architecture",
    # llama.cpp's loader (and ollama's, vLLM's GGUF path on it) not knowing the checkpoint's architecture: `error loading model
    # architecture: unknown model architecture: 'qwen3'`
    "unknown_model:gguf_arch": r"unknown model architecture: ['`]?[\w.-]+['`]?",
    "unknown_model:unrecognized": r"Unrecognized model in \S+\. Should have a `?model_type`? key",
    # the training engines' own failures (DeepSpeed ZeRO, FSDP, accelerate): facts/enginefailures.py owns them
    **{f"{failure.outcome}:{name}": failure.pattern for name, failure in ENGINE_FAILURES.items()},
    # a module or library that is not installed (or lacks a name): the evidence names it, the context the importer
    "missing_module:not_found": r"No module named ['‘’\"]?[A-Za-z_][\w.]*['‘’\"]?",
    "missing_module:requires_library": r"requires\s+the\s+\S+\s+library\s+but\s+it\s+was\s+not\s+found\s+in\s+your\s+envir\w*",  # 3.x: 'enviromnent'
    "missing_module:requires_packages": r"requires\s+the\s+following\s+packages\s+that\s+were\s+not\s+found\s+in\s+your\s+envir\w*:\s*[\w.,\s-]+",
    "missing_module:requires_pin": r"requires\s+`?[A-Za-z_][\w.-]*(?:[<>=!~]=?[\w.*]+)?`?\s*:\s*(?:[Pp]lease\s+)?(?:run|install)\s+`?pip install",
    "missing_module:metadata": r"No package metadata was found for\s+[A-Za-z_][\w.-]*",
    # Triton Inference Server's for a backend that is not installed in its backends folder
    # the linker finding no library the build links (`/usr/bin/ld: cannot find -lnvinfer`): that library is not installed
    "missing_module:linker": r"\bld(?:\.\w+)?: (?:cannot find|找不到) -l[\w+.-]+",  # (and in a Chinese locale)
    "missing_module:backend": r"unable to find backend library for backend '[\w.-]+'",
    "missing_module:seems_not_installed": r"package\s+`?[A-Za-z_][\w.-]*`?\s+seems\s+to\s+be\s+not\s+installed",
    "missing_module:not_installed": r"`?[A-Za-z_][\w.-]*`?\s+is\s+not\s+installed\.?\s+Please\s+install",
    "missing_module:cannot_import": r"cannot import name '?[A-Za-z_]\w*'? from '?[A-Za-z_][\w.]*'?",
    "driver_too_old:old": r"NVIDIA driver on your system is too old",
    "driver_too_old:insufficient": r"(?i:CUDA driver version is insufficient)",
    # NVIDIA's container hook refusing an image whose CUDA the host driver cannot run (`unsatisfied condition: cuda>=12.4,
    # please update your driver to a newer version, or use an earlier cuda container`)
    "driver_too_old:container": r"(?i:unsatisfied condition: cuda\s*>=?\s*\d|please update your (?:nvidia |gpu )?driver)",
    # the CUDA driver's user-space library and its kernel module from different releases (`kernel version 470.182.3 does not
    # match DSO version 520.61.5 -- cannot find working devices`): the installed driver is older than the library loaded
    "driver_too_old:dso": r"kernel version [\d.]+ does not match DSO version [\d.]+",
    # NVIDIA's containers' start-up banner (`This container was built for NVIDIA Driver Release 440.33 or later, but
    # version 418.87.01 was detected and compatibility mode is UNAVAILABLE`), wrapped over two lines
    "driver_too_old:ngc": r"(?i:container was built for NVIDIA Driver Release [\d.]+ or later,? but\s+version [\d.]+ was detected)",
    "unsupported_gpu:fa2": r"FlashAttention only supports (?:Ampere|Turing) GPUs or newer",
    "unsupported_gpu:head_dim": r"FlashAttention\s+(?:backward|forward)?\s*for\s+head\s*dim\s*\S+\s+(?:\d+\s+)?requires",
    "unsupported_gpu:datacenter": r"requires\s+(?:an?\s+)?A100(?:/A800)?\s+or\s+H100",
    "unsupported_gpu:is_sm": r"Expected (?:is_sm\w+(?: \|\| )?)+ to be true, but got false",
    "unsupported_gpu:kernel": r"no kernel image is available for execution on the device",
    # HIP's for the same (ROCm: no code object built for this GPU's gfx target)
    "unsupported_gpu:hip_binary": r"hipErrorNoBinaryForGpu|Unable to find code object for all current devices",
    "unsupported_gpu:sm": r"is not compatible with the current PyTorch installation",
    "unsupported_gpu:too_old": r"PyTorch no longer supports this GPU because it is too old",
    # a capability refusal in a library's own words: `Your setup doesn't support bf16/gpu` (transformers' TrainingArguments)
    # vLLM's and torch's bf16 refusal, in any case (a log pasted lower-cased)
    # (and any feature's: Triton's `f8e4m3nv is only supported on compute capability >= 90`; an application's `FP8 models
    # require a GPU with Compute Capability 8.9 or higher`)
    "unsupported_gpu:bf16_cc": r"(?i:\w+\s+(?:is|are)\s+only\s+supported\s+on\s+"
    r"(?:(?:gpus|devices)\s+with\s+)?compute\s+capability)"
    r"|(?i:\brequires?\s+(?:an?\s+)?(?:nvidia\s+)?(?:gpu|device)s?\s+with\s+(?:a\s+)?compute\s+capability\s+(?:of\s+)?(?:at\s+least\s+|>=?\s*)?\d+(?:\.\d+)?"
    r"(?:\s+or\s+(?:higher|above|newer|later))?)",
    "unsupported_gpu:setup": r"(?i:(?:setup|device|gpu|hardware|machine)\s+(?:doesn't|does\s+not|cannot|can't)\s+support\s+(?:bf16|bfloat16|fp8|tf32|flash))"
    # a kernel's own refusal of the GPU (bitsandbytes: `ERROR: Your GPU does not support Int8 Matmul!`)
    r"|(?i:\byour\s+gpu\s+(?:doesn't|does\s+not)\s+support\s+(?:int8|int4|fp16|half|8-?bit|4-?bit|tensor\s+cores?)\b)",
    # ptxas refusing an instruction the target GPU lacks (`Feature 'cvt.bf16.f32' requires .target sm_80 or higher`: a
    # Triton kernel's bf16 on a pre-Ampere GPU)
    # vLLM's check of a quantization method against the GPU (`The quantization method awq is not supported for the current
    # GPU. Minimum capability: 75. Current capability: 70.`)
    "unsupported_gpu:capability": r"not supported for the current GPU\. Minimum capability: \d+\. Current capability: \d+",
    # a ROCm build without kernels for this GPU's gfx target (CUDA's `no kernel image` in HIP's words)
    "unsupported_gpu:hip_function": r"HIP error: invalid device function|hipErrorInvalidDeviceFunction",
    # a ptxas that does not know the GPU at all (`Value 'sm_120' is not defined for option 'gpu-name'`)
    "unsupported_gpu:ptxas_arch": r"Value 'sm_\d+[a-z]?' is not defined for option 'gpu-name'",
    # an operator with no kernel on Apple's GPU, and xformers' kernels refusing a GPU's shared memory
    # (and a dtype Apple's GPU has none of: `Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64`)
    "unsupported_gpu:mps": r"is not (?:currently )?implemented for the MPS device"
    r"|(?i:the MPS (?:framework|backend) (?:doesn't|does not) support (?:float64|double|complex))",
    "unsupported_gpu:xformers_smem": r"\bSm\d+ does not have enough shared-memory",
    "unsupported_gpu:ptxas": r"Feature '[^'\n]{1,80}' requires \.target sm_\d+ or higher",
    "oom:cuda": r"CUDA out of memory|(?i:cuda out of memory\. tried to allocate)",  # also as a user pasted it lower-cased
    # torch's allocator message without its first words (an excerpt that kept its tail)
    "oom:tail": r"Tried to allocate [\d.]+ [KMGT]i?B \(GPU \d+; [\d.]+ [KMGT]i?B total capacity",
    # Paddle's allocator (`Out of memory error on GPU 0. Cannot allocate 1.531250GB memory on GPU 0`), and a device allocation
    # call failing in any framework's words (MXNet: `cudaMalloc retry failed: out of memory`)
    "oom:alloc": r"Out of memory error on (?:GPU|XPU|NPU) \d+|Cannot allocate [\d.]+\s?[KMGT]i?B memory on (?:GPU|XPU|NPU)"
    r"|\b(?:cudaMalloc|cuMemAlloc|hipMalloc)\w*(?: retry)? failed: out of memory|(?i:alloc(?:ate)? device memory failed)",
    "oom:error": r"OutOfMemoryError",
    "oom:hip": r"(?:HIP|NPU|XPU|MPS backend) out of memory",
    "oom:hip_enum": r"hipErrorOutOfMemory|HIP_ERROR_OutOfMemory",  # CUDA's, cuBLAS's and cuDNN's codes are facts/errorcodes.py's
    # XLA's status words, also in a glog line a terminal wrapped (`Resource exhausted: Out \nof memory while trying to allocate`)
    "oom:xla": r"RESOURCE_EXHAUSTED|ResourceExhaustedError|OOM when allocating tensor|Resource exhausted:\s+Out\s+of\s+memory",
    # torch's CPU allocator, and torch7's (`$ Torch: not enough memory: you tried to allocate 0GB. Buy new RAM!`)
    "oom:cpu": r"DefaultCPUAllocator: (?:can't allocate|not enough) memory|not enough memory: you tried to allocate",
    # the host's allocator, printed outside any exception: Rust's alloc error (tokenizers), C++'s, errno 12
    # DataLoader workers out of shared memory (/dev/shm), in torch's and Paddle's words
    "oom:shm": r"(?i:insufficient shared memory \(shm\))",
    "oom:host": r"memory allocation of \d+ bytes failed|std::bad_alloc|\[Errno 12\] Cannot allocate memory",
    # the kernel's, Slurm's, Kubernetes' and Ray's OOM killers
    "oom:killer": r"oom-kill event|(?i:out of memory: kill(?:ed)? process|killed by (?:the )?oom[- ]?killer)|invoked oom-killer|OOMKilled|running low on memory"
    r"|\b[1-9]\d*\s+Workers?\s+\([^)\n]{0,40}\)\s+killed\s+due\s+to\s+memory\s+pressure"  # the raylet's count (0 is no OOM)
    # Slurm's own words for the kernel's OOM kill of a step (`Detected 1 oom_kill event`, `srun: error: n1: task 3: Out Of Memory`)
    r"|\boom_kill event|\btask \d+: Out Of Memory\b",
    # NCCL's own allocation failing, and an engine refusing to start on the free memory it found (vLLM)
    "oom:nccl": r"NCCL WARN Cuda failure '?out of memory",
    "oom:free_memory": r"Free memory on device[^\n]*(?:less than|lower than|not enough)"
    r"|(?i:no available memory for (?:the )?cache blocks)",  # vLLM's, also as a user retells it
    # Colab's notice of a runtime that ran out of host memory
    "oom:colab": r"(?i:session crashed after using all available RAM)",
    # Intel's XPU allocator, and pinned host memory that could not be had
    "oom:other_devices": r"Allocation is out of device memory on current platform|(?i:cudaHostAlloc failed[^\n]{0,40}out of memory)",
    # vLLM's KV cache, after profiling the free memory, holds fewer tokens than one request of the configured length
    # a server's refusal to load a model into the memory it has (ollama: `model requires more system memory (5.3 GiB) than is
    # available (4.4 GiB)`)
    "oom:model_memory": r"(?i:requires more (?:system |gpu |video |device )?memory \([\d.]+ ?[KMGT]i?B\) than is available)",
    # TensorFlow's kernel launch refused for memory (`Non-OK-status: GpuLaunchKernel(…) status: Internal: out of memory`)
    "oom:tf_status": r"Non-OK-status:[^\n]{0,400}status: (?:Internal|Resource exhausted): out of memory",
    "oom:kv_len": r"(?i:larger than the maximum number of tokens that can be stored in (?:the )?KV cache)",
    "ddp_ready_twice:once": r"Expected\s+to\s+mark\s+a\s+variable\s+ready\s+only\s+once",
    "ddp_ready_twice:twice": r"marked\s+as\s+ready\s+twice",
    # DeepSpeed ZeRO's reduction hook firing twice for one parameter (reentrant checkpointing, as DDP's above)
    "ddp_ready_twice:zero": r"Gradient\s+computed\s+twice\s+for\s+this\s+partition",
    "grad_lost:element0": r"element\s+\d+\s+of\s+(?:tensors|variables)\s+does\s+not\s+require\s+grad",  # 'variables': torch < 1.0
    "grad_lost:none_output": r"none\s+of\s+output\s+has\s+requires_grad=True",
    "grad_lost:none_inputs": r"None\s+of\s+the\s+inputs\s+have\s+requires_grad=True",
    # DDP's reducer: parameters of the model produced no gradient in the last step (unused in the loss)
    "grad_lost:ddp_unused": r"Expected\s+to\s+have\s+finished\s+reduction\s+in\s+the\s+prior\s+iteration"
    r"|(?i:your\s+module\s+has\s+parameters\s+that\s+were\s+not\s+used\s+in\s+producing\s+(?:the\s+)?loss)",  # its second sentence alone
    "nan_loss:probability": r"probability tensor contains either `?inf`?, `?nan`? or element < 0",
    "nan_loss:dof": r"std\(\): degrees of freedom is <= 0",
    # (a few words may stand between the loss and its verb: `the segmentation loss before adapt (i == 0) becomes nan`; it
    # may go `into` NaN)
    "nan_loss:phrase": r"(?i:\b(?:loss(?:es)?|kl(?:[ _]divergence)?|the results?)(?:\s+|\s[^\n.;:]{1,40}?\s)"
    r"(?:(?:always|still|often|then)\s+)?(?:is|are|became|becomes|was|were|went|goes|equals?|equal(?:ed|s)?\s+to|turn(?:s|ed)?(?:\s+(?:up|into))?)\s+(?:always\s+|still\s+)?(?:going\s+|getting\s+|turning\s+|becoming\s+)?(?:(?:in)?to\s+)?(?:nan|inf)\b"
    # training told returning NaN (`training begin to return nan after hundreds of iterations`)
    r"|\btraining\s+(?:begins?|began|starts?|started)\s+to\s+(?:return|output|produce|give)s?\s+nan\b"
    # `I got the following NaN loss`, and in Chinese (`loss为nan`, `loss变成了nan`)
    r"|\b(?:got|get|gets|getting|see|seeing|saw|encounter(?:s|ed)?|hit|shows?|showing|gives?|giving)\s+"
    r"(?:an?\s+|the\s+(?:following\s+)?)?nan\s+loss(?:es)?\b"
    # gradients told as NaN (`nan gradients in Lora Adapters`), and a loss printed as a NaN tensor with its loss's backward
    # (`tensor(nan, device='cuda:1', dtype=torch.float16, grad_fn=<NllLossBackward0>)`)
    r"|\b(?:nan|inf)\s+grad(?:ient)?s\b|\bgrad(?:ient)?s\s+(?:are|were|become|became)\s+(?:all\s+)?(?:nan|inf)\b"
    r"|tensor\((?:nan|inf)\b[^\n)]{0,120}grad_fn=<\w*(?:Loss|Nll|Mse|Entropy)\w*Backward\d*>"
    # a loss or gradient norm told going NaN after a value (`grad_norm at that point is 3.3 million, then NaN`), a NaN error
    r"|\b(?:loss|grad[_ ]norm)\b[^\n]{0,60}?,?\s+then\s+(?:to\s+)?(?:nan|inf)\b|\b(?:problem|issue) (?:of|with) nan\b|\bthen the nan error\b)"
    + "|(?i:\\b(?:loss|损失)[^\\n，,。;；]{0,8}?(?:为|是|变成了?|变为|出现了?)\\s*(?:nan|inf)\\b)",
    "nan_loss:anomaly": r"returned nan values in its \d+\w* output",  # autograd's anomaly mode
    # fp16 dynamic loss scaling gave up: every step overflows (the loss is inf)
    "nan_loss:scale": r"(?i:loss scale already at minimum|minimum loss scale reached|cannot decrease (?:loss )?scale anymore"
    # apex, DeepSpeed and fairseq halving a scale that every step overflows, down to 2 or below (apex's past 1e-10)
    r"|(?:reducing|setting) (?:loss scale )?to:? (?:[0-2](?:\.\d+)?(?:e-\d+)?|\d(?:\.\d+)?e-\d{2,})(?:[^\d.]|\.(?:\D|$)|$))",
    # a trainer's or engine's own notice that the gradient norm is not finite (a clip that raised, a skipped step's report)
    "nan_loss:grad_norm": r"(?i:grad(?:ient)?[ _]norm\s+(?:is|was|became)\s+(?:always\s+|still\s+)?(?:not\s+finite|non-?finite|nan|inf)\b"
    r"|non-?finite\s+(?:grad(?:ient)?s?\s+norm|grad(?:ient)?[ _]norm)|for gradients from `parameters` is non-finite"
    r"|(?:nan|inf)\s+(?:found|detected)\s+in\s+(?:the\s+)?(?:local\s+)?grad(?:ient)?s?\b)",
    "garbled_output:bangs": r"!!!!!!!!!!!!!!!!!!!!!!!!|(?:! ){16}!",  # also as a tokenizer spaced them
    # sentencepiece's unknown piece (`⁇`) over and over: ids the tokenizer has no text for
    "garbled_output:unknown_pieces": r"(?:⁇[ \t]*){12}",
    # a meter's running average that a NaN step poisoned (timm's and BEiT's MetricLogger print `value (global average)`:
    # `grad_norm: 0.3922 (nan)`), while the last value shown is finite
    # a logger's key-value table (OpenAI's `| loss          | nan       |`)
    "nan_loss:table_row": r"(?m:^)\|[ \t]*(?:\w+[_/])?(?:loss|grad_norm)\w*[ \t]*\|[ \t]*[-+]?(?i:nan|inf)[ \t]*\|",
    "nan_loss:meter": r"\b(?:loss|grad_norm)\W{0,3}:\s*-?\d[\d.e+-]*\s+\((?i:nan|inf)\)",
    # transformers' refusal of a model its Auto classes do not map, pasted without its ValueError (remote code not trusted,
    # or a release older than the model)
    "unknown_model:unmapped": r"Unrecognized configuration class <class '[\w.]+'> for this kind of AutoModel",
    "nccl_error:watchdog": r"Watchdog caught collective operation timeout",
    "nccl_error:error": r"NCCL error in:|HCCL error in:",  # Ascend's HCCL, NCCL's counterpart on NPUs
    # Ascend's notice that a collective's notify wait timed out (`EI0002: The wait execution of the Notify register times out`)
    "nccl_error:hccl_wait": r"The wait execution of the Notify register times out",
    # torch's c10d store barrier that not every rank reached while the process group started
    "nccl_error:store_barrier": r"Timed out initializing process group in store based barrier",
    # c10d's TCP store waiting on the other ranks past its timeout (`[c10d] waitForInput: socket SocketImpl(…) timed out
    # after 600000ms`): the ranks stopped meeting at a collective's rendezvous
    "nccl_error:store_socket": r"\[c10d\] waitForInput: socket [^\n]{0,300}timed out after \d+ ?ms",
    "nccl_error:aborted": r"NCCL communicator was aborted",
    "nccl_error:stuck": r"ProcessGroupNCCL's watchdog got stuck",
    "nccl_error:failed": r"Some NCCL operations have failed or timed out",
    # NCCL's own WARN / ERROR lines that name a failure (a socket closed, a broken pipe, a remote error through the proxy);
    # its harmless WARN lines (a missing plugin, iommu advice) name none of these
    "nccl_error:warn": r"NCCL (?:WARN|ERROR)\b[^\n]*(?i:error|failed\s*:|failure|closed|broken pipe|reset by peer|refused"
    r"|timed? ?out|truncated|abort|unhandled|mismatch|unreachable|failed\s+to\b|wrong\s+type|retcode\s+[1-9]"
    # the bootstrap root seeing one rank twice (a duplicate rank: the job cannot form); a verbs or system call that failed
    r"|already\s+checked\s+in|call\s+to\s+\w+\s+failed)",
    # ProcessGroupNCCL's own watchdog line (`[E ProcessGroupNCCL.cpp:1537] ... Timeout at NCCL work: 15734`), printed as a log
    # record, not an exception, before the process is torn down
    "nccl_error:pg_timeout": r"Timeout at NCCL work:\s*\d+",
    # the C++ trace of ProcessGroupNCCL's watchdog raising (its own message may be cut above it)
    "nccl_error:watchdog_trace": r"Exception raised from (?:ncclCommWatchdog|watchdogHandler|checkTimeout) at\b",
    # the same WARN lines as NCCL before 2.4 printed them: its source file, no `NCCL` word (`include/socket.h:344 WARN
    # Socket creation failed : Address family not supported by protocol`)
    "nccl_error:old_warn": r"\b(?:include|transport|misc|graph|proxy|bootstrap|init|enqueue|collectives)/[\w/]*\.(?:h|cc|cu):\d+ WARN\b"
    r"[^\n]*(?i:failed|error|closed|refused|timed? ?out|abort|unreachable|not supported)",
    # NCCL's InfiniBand transport reporting a failed work completion (`NET/IB : Got completion from peer … with status=12`)
    "nccl_error:ib_completion": r"Got completion from peer \S+ with (?:status=|error )[1-9]"
    # the verbs library's words for a failed work completion, in any collective library's log (UCCL's `CQE ERROR … status=12
    # (transport retry counter exceeded)`, NCCL's and UCX's too)
    r"|(?i:transport retry counter exceeded|remote access error|remote operation error|local protection error)",
    # ProcessGroupNCCL's (and Gloo's) error and fatal log records (`[E429 13:55:49.38 ProcessGroupNCCL.cpp:1743]`; its
    # warnings are `W`): it logs at those levels only on the way to an abort, whatever the wrapped message after them says
    "nccl_error:pg_log": r"\[[EF](?:\d{3,4}\s+[\d:.]+)?\s+ProcessGroup(?:NCCL|Gloo)\.cpp:\d+\]",
    # NCCL's trace of an error code returned up its call chain (`NCCL INFO proxy.cc:1306 -> 3`, `NCCL WARN group.cc:585 -> 3`,
    # `… -> 5 [Async thread]`): a non-zero code, in any wrapper
    "nccl_error:retcode": r"NCCL (?:INFO|WARN)\s+[\w/.-]+\.(?:cc|cu|h):\d+\s+->\s+[1-9]\d*(?:[ \t]+\[[^\]\n]*\])?[ \t]*(?:\r?\n|$)",
    # ollama's notice that its llama.cpp runner died (`llama runner process has terminated: signal: killed`, `exit status
    # 0xc0000409`, or with no reason: `%!w(<nil>)`)
    "crash:runner": r"llama runner process (?:has )?terminated:\s*(?:%!w\(<nil>\)|exit status|signal:)",
    "crash:exitcode": r"exitcode\s*:\s*-(?:4|6|7|9|11)\b",
    # a negative status is the signal that killed the process, in a launcher's or a wrapper's words (`died with
    # <Signals.SIGSEGV: 11>`, `returned non-zero exit status -9`, `ERROR: error code -9`)
    "crash:status": r"(?:exit|error|return)[ _]?(?:code|status)\s*[:=]?\s*-(?:4|6|7|9|11)\b|<Signals\.SIG(?:ILL|ABRT|BUS|KILL|SEGV): \d+>"
    r"|exited on signal (?:4|6|7|9|11)\b",  # mpirun's (`process rank 4 with PID 0 on node n1 exited on signal 9 (Killed)`)
    "crash:elastic": r"Signal (?:4|6|7|9|11) \(SIG\w+\) received",
    # also torch's DataLoader (`Unexpected segmentation fault encountered in worker`), and AddressSanitizer's report of the
    # same signal (`AddressSanitizer: SEGV on unknown address`, `AddressSanitizer:DEADLYSIGNAL`)
    "crash:segv": r"(?i:segmentation fault)|AddressSanitizer:\s?(?:SEGV|DEADLYSIGNAL)\b|!!!!!!! Segfault encountered !!!!!!!",
    "crash:bus": r"Bus error",
    # text-generation-inference's launcher naming the signal a shard died of
    "crash:shard": r"Shard process was signaled to shutdown with signal (?:4|6|7|11)\b",
    # ggml's assertion: it aborts the process (llama.cpp, whisper.cpp and their Python bindings)
    "crash:ggml_assert": r"GGML_ASSERT\([^\n]{1,300}\)(?:\s+failed)?",
    # the shell's notice (also in a Chinese locale, or lower-cased alone on its line)
    "crash:killed": r"(?m)(?:^|\d[ \t]+)(?:Killed|已杀死)(?:[ \t]|$)|^[ \t]*killed[ \t]*$|^[ \t>]*(?:\*\*|__)Killed(?:\*\*|__)[ \t]*$",
    # an IDE's report of the signal that ended the run (PyCharm: `Process finished with exit code 139 (interrupted by signal 11: SIGSEGV)`)
    # (and fish's: `fish: Job 1, 'python main.py' terminated by signal SIGILL (Illegal instruction)`)
    "crash:interrupted": r"interrupted by signal (?:4|6|7|9|11):\s*SIG(?:ILL|ABRT|BUS|KILL|SEGV)|terminated by signal SIG(?:ILL|ABRT|BUS|KILL|SEGV)\b",
    # glog's failure banner too (`*** SIGSEGV (@0x19) received by PID 11091`, `*** Aborted at 1525421992 (unix time)`)
    "crash:core": r"(?:Aborted|Illegal instruction)[ \t]+\(core dumped\)|\*\*\* SIG(?:SEGV|BUS|ILL|ABRT)(?: \([^)\n]{0,40}\))? received"
    r"|\*\*\* Aborted at \d+ \(unix time\)",
    # torch's DataLoader naming the signal a worker died of (`DataLoader worker (pid 2287) is killed by signal: Killed.`)
    "crash:loader": r"is killed by signal: (?:Killed|Segmentation fault|Aborted|Bus error|Illegal instruction)",
    # Ray's, vLLM's and a launcher's notices that a worker process died (the signal or OOM it names decides where one is named)
    # Colab's notice of a runtime that died without an exception (`Your session crashed for an unknown reason`), and a
    # process pool's worker killed under it (`BrokenProcessPool: A process in the process pool was terminated abruptly`)
    "crash:colab": r"(?i:session (?:is |has )?crashed for (?:an? )?unknown reason)|A process in the process pool was terminated abruptly",
    "crash:worker_died": r"A worker died or was killed while executing|(?:[Aa]ctor|[Ww]orker|Worker proc [\w-]+|Engine core proc [\w-]+) died unexpectedly"
    r"|Worker unexpectedly exits|worker process (?:\d+ )?(?:was )?killed by signal|(?:rank|worker) \d+ (?:died|exited) with signal"
    r"|Raylet is terminated\b[^\n]{0,200}?Termination is unexpected",  # the node's raylet died (its own notice says so)
    # a wall-clock limit the scheduler enforced
    "timeout:scheduler": r"DUE TO TIME LIMIT|Job step aborted: Waiting up to \d+ seconds for job step to finish|DeadlineExceeded",
    # a CI runner's own limit on a job (GitHub Actions: `The job has exceeded the maximum execution time of 6h0m0s`; GitLab:
    # `ERROR: Job failed: execution took longer than 1h0m0s seconds`; Azure Pipelines: `ran longer than the maximum time of`)
    "timeout:ci": r"job (?:running on [^\n]{1,80}? )?has exceeded the maximum execution time of|execution took longer than \d[\dhms]* ?(?:seconds|minutes)?"
    r"|ran longer than the maximum time of \d+ minutes",
    # PBS/Torque's and LSF's wall-clock kills (`=>> PBS: job killed: walltime 259217 exceeded limit 259200`, `TERM_RUNLIMIT: job
    # killed after reaching LSF run time limit`)
    "timeout:batch": r"job killed: walltime \d+ exceeded limit|TERM_RUNLIMIT|reaching LSF run time limit"
    # the scheduler's mail (PBS `Job exceeded its walltime limit. Job was aborted`, Moab `job exceeded wallclock limit`)
    r"|(?i:job exceeded (?:its )?wall[- ]?(?:time|clock) limit)",
    # the user's own words for a run stopped at a fixed wall-clock mark (`the job times out after 60 minutes`)
    "timeout:said": r"(?i:\b(?:job|run|training|pipeline|experiment)s? (?:always |then |just )?(?:times|timed|timing) out after"
    r" \d+ ?(?:min(?:ute)?s?|h(?:ours?)?|hrs?)\b)",
    # not an outcome: an engine that failed to start (vLLM's EngineCore); its cause line decides, else it is the engine's failure
    # (or that died running: vLLM's `EngineCore encountered a fatal error` over a traceback an excerpt may cut)
    "notice:engine_start": r"EngineCore failed to start|Engine core initialization failed|EngineCore encountered a fatal error",
    # not an outcome: the user's own words that the model's output is garbled (a reply too short to measure, or told only in
    # prose: `the response is gibberish`, `（乱码循环）`); decides only where nothing else does
    "notice:said_garbled": r"(?i:\bgibberish\b|\bgarbled (?:output|text|tokens?|characters?|responses?|replies|answers?|generations?)\b"
    r"|(?:output|text|responses?|replies|answers?|generations?|completions?) (?:is|are|was|were|becomes?|became) (?:garbled|gibberish|garbage)\b"
    # (with words between and an adverb: `output tokens are completely garbled`, `the output generated is nonsensical`)
    r"|\b(?:outputs?|responses?|replies|answers?|generations?|completions?)(?:\s+\w+){0,2}?\s+(?:is|are|was|were|became|becomes?)\s+"
    r"(?:completely\s+|totally\s+|entirely\s+|mostly\s+|all\s+)?(?:garbled|gibberish|garbage|nonsensical|meaningless|incoherent|corrupted)\b"
    r"|\bgarbled\s*/\s*\w+ (?:output|text|tokens?|responses?|answers?)\b"
    r"|\bgarbage (?:output|text|tokens?|characters?)\b|乱码|胡言乱语|胡乱回答|乱回答|答非所问|回答重复|重复回答|无限重复|重复输出"
    # the same told in other words: nonsense, or a reply repeating itself
    r"|\bnonsense (?:output|text|answers?|responses?|replies|generations?)\b"
    r"|(?:outputs?|answers?|responses?|replies|generations?) (?:is|are|was|were) nonsense\b"
    r"|\brepetitive (?:output|text|answers?|responses?|replies|generations?)\b"
    r"|\b(?:keeps? )?repeat(?:s|ing)? (?:itself|the same (?:words?|tokens?|phrases?|sentences?)) (?:endlessly|forever|over and over)"
    # endless repetition, and an output told as a run of `!` (a reply too short to measure: `输出为'!!!!...'`)
    r"|\b(?:endless(?:ly)?|infinite(?:ly)?)\s+repeat\w*|\brepeating\s+(?:special\s+)?(?:characters|tokens|symbols)\b"
    r"|\brepeat(?:s|ed|ing)?\s+until\s+(?:the\s+)?max(?:imum)?\s*(?:new\s+)?(?:tokens?|length)"
    r"|(?:\boutputs?|\bresponses?|\bgenerat\w*|输出|回复|回答)(?s:.{0,30}?)[!！]{4,}|(?:输出|回复|回答|生成)[^\n]{0,20}感叹号"
    r"|\b(?:outputs?|responses?|repl(?:y|ies)|generat\w*|returns?)\s+(?:only|nothing but|just)\s+(?:exclamation marks|question marks|empty strings)\b"
    # the rest told as `!` (`fills the rest tokens with exclamation marks`, `returns only '!'`)
    r"|\b(?:fill(?:s|ed|ing)?|padd?(?:s|ed|ing)?)\b[^\n]{0,40}\bwith\s+exclamation\s+marks\b|\bonly\s+['\"`]!+['\"`]"
    # an output quoted as nothing but one mark or escaped newlines (`always generates '!'`, `the results were '\\n\\n\\n'`)
    r"|\b(?:outputs?|results?|responses?|repl(?:y|ies)|answers?|generat(?:es?|ed|ing|ions?)|returns?|produc(?:es?|ed|ing))\b[^\n'\"`]{0,25}"
    r"['\"`](?:[!?]|(?:\\n){3,})['\"`](?:\W|$))",
    # not an outcome: the user's own words that the run ran out of memory (`报 OOM`, `we hit OOM at step 3`, `it runs out of
    # GPU memory`); decides only where nothing else does
    "notice:said_oom": r"(?i:\b(?:reports?|reported|got|gets?|getting|hits?|hitting|throws?|threw|encounter(?:s|ed|ing)?|causes?|caused"
    r"|results? in|leads? to|led to)\s+(?:an?\s+|the\s+)?(?:CUDA\s+|GPU\s+)?OOM\b|\bOOM\s+(?:error|again|happens|occurs|occurred)\b"
    r"|\b(?:runs?|ran|running)\s+out\s+of\s+(?:GPU\s+|CUDA\s+|device\s+|video\s+)?memory\b)|报\s*OOM|出现\s*OOM|OOM了|显存不足|显存溢出|爆显存",
    # not an outcome: the user's words that no gradient flows (`0 loss and 0 grad_norm`, `grad_norm is always 0`)
    "notice:said_zero_grad": r"(?i:\b(?:grad(?:ient)?[_ ]norms?|gradients?)\s+(?:is|are|was|were|stays?|remains?|always\s+is)\s+(?:always\s+|all\s+)?"
    r"(?:0|zero)(?:\.0+)?\b|\b(?:0|zero)\s+grad(?:ient)?[_ ]norms?\b"
    # `grad_norm = 0 for all training steps` (a statement of every step, not one step's metrics)
    r"|\bgrad(?:ient)?[_ ]norms?\s*=\s*0(?:\.0+)?\s+(?:for|on|in|at)\s+(?:all|every|each)\b)"
    # and in Chinese (`grad_norm变为0`, `梯度一直为0`)
    r"|(?i:(?:\bgrad(?:ient)?[_ ]?norms?|梯度(?:范数)?)\s*(?:一直|始终|都)?\s*(?:变为|变成了?|为|是|等于)\s*0(?:\.0+)?(?:[^\d.]|$))",
    # an exception line at a line start (after rank/log prefixes): `RuntimeError: …`, `torch.x.FooError: …`
    "error:line": r"(?m)^(?:[ \t>]|\x1b\[[0-9;]*m)*(?:\[[^\]\n]{0,60}\]:?[ \t]*)*(?:[A-Za-z_][\w]*\.)*(?:[A-Z]\w*(?:Error|Exception)|Exception)"
    r"(?:\x1b\[[0-9;]*m)*(?::|[ \t\r]*$)",
    "error:traceback": r"Traceback \(most recent call last\)",
    # Hydra's notice under an exception it shortened to its message (the type and the trace are gone)
    # llama.cpp's refusal of a model file it cannot read (`error loading model: unrecognized tensor type 4` /
    # `llama_init_from_file: failed to load model`): the run did not start
    "error:model_load": r"llama_(?:init_from_file|load_model_from_file|model_load):\s*(?:failed to load model|error loading model)",
    # Slurm's refusal to start the job's tasks (`srun: error: Task launch for 36.0 failed on node cn131: Job credential
    # expired`, `srun: error: Unable to create step for job 123: …`): the run never started
    # (and sbatch's refusal of the job itself: `sbatch: error: Batch job submission failed: Requested time limit is invalid`)
    "error:srun": r"srun: error: (?:Task launch for \S+ failed on node|Unable to (?:create step|allocate resources))"
    r"|sbatch: error: Batch job submission failed",
    # a build that failed: torch's extension builder refusing a CUDA toolkit other than torch's own (`The detected CUDA version
    # (11.8) mismatches the version that was used to compile PyTorch (12.4)`), pip's summary of wheels it could not build
    "error:build": r"The detected CUDA version \([\w.]+\) mismatches the version that was used to compile\s+PyTorch"
    r"|ERROR: Failed to build installable wheels for some pyproject\.toml based projects"
    r"|ERROR: Could not build wheels for [\w.,\s-]{1,200}?which (?:is|are) required to install pyproject\.toml-based projects"
    # and pip finding no release to install at all (`ERROR: No matching distribution found for flashinfer-python`)
    r"|ERROR: (?:No matching distribution found for|Could not find a version that satisfies the requirement) \S+",
    # argparse refusing the command line (`vllm serve: error: unrecognized arguments: --enable-reasoning`, `litgpt: error:
    # argument subcommand: invalid choice: 'finetune_lora'`): the program never ran; classify.py names it an API mismatch
    # where the program is an installed distribution's command (its release does not take what the command was written for)
    "error:cli": r"(?m)^[ \t]*(?:[\w.-]+(?:[ \t]+[a-z][\w-]*)?: )?error: (?:unrecognized arguments:|argument [^\n:]{1,80}: invalid choice:)",
    "error:hydra": r"Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace",
    # not an outcome: a package's statement of the range it needs (evidence for an API mismatch, read by evidence.py)
    "evidence:range": r"(?i:supports?\s+[\w.-]+\s+versions?\b|(?:is|are)\s+required\s+for\s+a\s+normal\s+functioning"
    r"|,\s+but\s+you(?:'ll|\s+will)?\s+have\s+[\w.-]+\s+v?\d|you\s+have\s+(?:version\s+)?v?\d+\.\d+[\w.]*\s+installed"
    r"|requires?\s+[A-Za-z][\w.-]*\s*[<>=!~]=?\s*\d[\w.]*,?\s+(?:but\s+)?got\s+v?\d"
    r"|is\s+installed\s+with\s+version\s+v?\d[\w.]*,?\s+which\s+is\s+(?:less|lower|older)\s+than\s+the\s+minimum"
    r"|distribution\s+was\s+not\s+found\s+and\s+is\s+required\s+by|\),\s+Requirement\.parse\("
    r"|==\s*v?\d[\w.]*\s+is\s+(?:used|installed)\s*,?\s+but\s+(?:it\s+is\s+)?incompatible|,?\s+but\s+this\s+version\s+of\s+[\w.-]+\s+requires\s"
    r"|incompatible\s+version\s+of\s+[\w.-]+\.?\s+Found\s+version|\s+is\s+(?:newer|older)\s+than\s+and\s+incompatible\s+with\s"
    r"|installed\s+version\s+of\s+[\w.-]+\s+is\s[^\n]{1,40}\s+not\s+(?:yet\s+)?supported\s+(?:in|by)\s|(?:not|in)\s?compatible\s+with\s+[\w.-]+\s*[<>]=?\s*\d"
    r"|Found\s+cu[A-Za-z]+\s+version\s+\d+,?\s+but\s+\w+\s+was\s+built\s+against"
    # (JAX's block over several lines, read whole: `Outdated cuDNN installation found.` … `Installed version: 8907`)
    r"|Outdated\s+(?:cuDNN|cuBLAS|cuSPARSE|cuFFT|cuSOLVER|NCCL)\s+installation\s+found\.?\s*(?:Version\s+\w+\s+was\s+built\s+against:\s*\d+\s+)?"
    r"Minimum\s+supported:\s*\d+\s+Installed\s+version:\s*\d+)",
}
# Facts a remedy names (the cuBLAS version loaded, the sampling and group settings, the model and attention);
# the value is the group named VALUE, or the matched text for a fact that is a presence.
FACTS: dict[str, str] = {
    "cublas": r"(?:libcublas(?:Lt)?\.so\.|nvidia-cublas-cu\d+[=\s]+|cuBLAS[ :]+)(?P<VALUE>\d+\.\d+\.\d+(?:\.\d+)?)",
    "num_generations": r"num_generations\W{1,4}(?P<VALUE>\d+)\b",
    "temperature": r"\btemperature\W{1,4}(?P<VALUE>\d+(?:\.\d+)?)",
    "top_p": r"\btop_p\W{1,4}(?P<VALUE>\d+(?:\.\d+)?)",
    "gemma2": r"(?i:gemma-?2)",
    "flash_attn": r"(?i:flash_attention_2|flash[-_]attn)",
}

#: What a signature's wording also matches where nothing failed: NCCL's optional transports and plugins it looked for and did
#: without (`misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]` then `Using network Socket`; `NET/Plugin : Plugin
#: load returned 2 : libnccl-net.so: cannot open shared object file`). Keyed by the outcomes (or signatures) they concern.
HARMLESS: dict[str, re.Pattern[str]] = {
    "nccl_error": re.compile(r"Failed to open libibverbs|NET/Plugin|lib[nr]ccl-net\.so"),
    "import_abi:missing_lib": re.compile(r"NET/Plugin|lib[nr]ccl-net\.so"),
    # the OOM killer among the causes a notice lists as possible (Ray's `Some common causes include: (1) the process was
    # killed by the OOM killer …`): no evidence by itself, as in the rules
    "oom:killer": re.compile(r"(?:potential|possible|common) (?:root )?causes?\b", re.I),
}


def _harmless(name: str, buf: bytes, start: int, end: int) -> bool:
    """Whether the whole line a signature matched (not the shortened evidence) says nothing failed (HARMLESS)."""
    rule = HARMLESS.get(name) or HARMLESS.get(name.split(":")[0])
    if rule is None:
        return False
    lo, hi = _line_bounds(buf, start, end)
    return rule.search(buf[lo:hi].decode("utf-8", "replace")) is not None


_KEYCH = rb"[\w./-]"
_SEP = rb"['\"]?(?:\s*[:=]\s*|[ \t]+)['\"]?(?:tensor\()?"
# a metric a rule judges, under any prefix (`actor/grad_norm`, `train/loss`) or spelling (`grad norm`)
_METRIC = rb"(?P<metric>(?P<mkey>grad[ _]norm|reward_std|frac_reward_zero_std)" + _SEP + rb"(?P<mval>-?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)))"
# any loss or gradient norm, however named (`critic/vf_loss:nan`, `'policy_loss': nan`, `loss=tensor(nan`)
_NONFINITE = _KEYCH + rb"*(?i:loss|grad[ _]norm)" + _KEYCH + rb"*" + _SEP + rb"-?(?i:nan|inf(?:inity)?)\b"
_GEN: dict[str, bytes] = {
    # a label, or the field a server's JSON answer carries the text in (`Generated text:`, `{"text": …}`, `"content":`)
    "labelled": rb"(?i:\b(?:completions?|generations?|generated(?:[ _]text)?|outputs?|responses?|predictions?|preds?|samples?|answers?|decoded"
    rb"|text|content|results?)\b['\"]?\s*[:=])",
    "special_run": rb"(?:<\|?[\w.-]{1,30}\|?>(?:\\n|\s){0,4}){8}",
    "unk_run": rb"(?:\[(?:UNK|PAD)\](?:\\n|\s){0,4}){8}",  # BERT-style tokenizers' unknown and padding tokens, decoded
    "ids": rb"(?:\d+,(?:\s|\[[^\]\n]*\]|:|\x1b\[[0-9;]*m)*){9}\d",
    "word_run": rb"(?:[A-Za-z][A-Za-z0-9]*[^\w\n]{1,3}){24}",  # words, or tokens with digits (`p412 p412 …`)
    "char_run": b"|".join(b"%d{%d}" % (d, CHAR_RUN) for d in range(10)),
    "non_ascii": rb"[^\x00-\x7f]{%d}" % CHAR_RUN,  # no longer than the shortest run garble.py convicts: else never judged
    # a letter of another script between Latin letters, no space between (`ağrıAllWindows`): salad of multilingual tokens
    "glued": rb"[A-Za-z][^\x00-\x7f]{1,8}[A-Za-z]",
}
#: Where a traceback or an exception may start, behind any prefix: a traceback header, a frame, faulthandler's dump, an
#: exception type (`…Error`, `…Exception`, `ray.exceptions.RayTaskError(OutOfMemoryError)`) followed by `:`, `(` or the line
#: end, a rich frame (`config.py:891 in _batch_assertion`), pytest's (`config.py:891: in f`), IPython 8's (`File …py:5`).
#: What it finds is read by tracebacks.py, a region at a time.
_STRUCT = (
    rb"Traceback \(most recent call last\)|File \\?\"[^\"\n]{1,1000}\\?\", line \d+|Fatal Python error:|Exception ignored in"
    rb"|terminate called after throwing an instance of|[Cc]annot import name \W{0,3}\w|' object has no attribute '"
    rb"|[a-z0-9] has no attribute \w|' has no attribute '|[Nn]o module named '|Can't get attribute '"
    + "|\\(\\) got an unexpected keyword argument ['‘’]".encode()
    + rb"|\(\) takes (?:from )?\d+(?: to \d+)? positional arguments? but"
    rb"|\(\) missing \d+ required (?:keyword-only |positional )?arguments?:(?: '|[ \t]*(?m:$))|\(\) got multiple values for (?:keyword )?argument '"
    rb"|\(\) got some positional-only arguments passed as keyword arguments: '"
    + "|[Uu]nexpected keyword argument ['‘’]".encode()
    + rb"|model_kwargs`? are not used by the model|"
    + "\\bname [`'\"‘’]\\w+[`'\"‘’] is not defined".encode()
    + rb"|(?:\b|\x1b\[[0-9;]*m)(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failed|Failure|Fault|NotFound|Conflict|OfResources)(?:\([\w.]+\))?"
    rb"(?:\x1b\[[0-9;]*m)*(?::[ \t]|:[A-Z]|\(|:?[ \t\r]*(?:\x1b\[[0-9;]*m)*(?m:$)|:?\x1b)"  # `ValueError:Network …` too
    rb"|File [~A-Za-z:]*[/\\][^\s,\"]*\.py:\d|Cell In ?\[\d*\], line \d"
    rb"|\b(?:type|value|runtime|attribute|import|key|index|name|assertion|modulenotfound|notimplemented|os)error: "  # lower-cased
    rb"|\.py:\d+:? in [\w<]|\.py:\d+:[ \t]*(?m:$)|\.py: *" + "│".encode() + rb"|\.py\\?\", line \d+|\.py\]?(?:\([^)\n]{0,200}\))? in [\w<]"
)
# a metrics table's header (a notebook's Trainer output, markdown or columns): `Step | Training Loss | reward_std | …`
_TABLE = rb"(?mi)^[ \t|>]*step[ \t]*(?:\||\t|  )[^\n]*(?:loss|reward|grad[ _]norm)[^\n]*$"
TABLE_ROWS = 64  # rows of a table read
#: Column names as the rules know them (`Training Loss` is the loss).
COLUMNS = {"training_loss": "loss", "train_loss": "loss", "grad norm": "grad_norm"}
_STRIP = re.compile(rb"\[[^\]\n]{0,80}\]|\r[^\n]{0,400}")
_LIST_LINE = re.compile(rb"[\s:]*\d+\s*,")  # a line that goes on with a list of numbers


#: A logger's level that says a record reports a failure (in the prefix `lines.clean` removes).
_ERROR_LEVEL = re.compile(r"\b(?:ERROR|CRITICAL|FATAL)\b|^E\d{4} ")

#: Signatures whose hit keeps the lines before it (a traceback names the package that did the import).
CONTEXT_OF = ("missing_module",)
CONTEXT_LINES = 40


@dataclass(frozen=True)
class Hit:
    """Where a signature or metric was seen: 1-based line number and the cleaned line (and, for CONTEXT_OF
    signatures, up to CONTEXT_LINES cleaned lines before it)."""

    line_no: int
    line: str
    context: tuple[str, ...] = ()

    def quote(self) -> str:
        """`line 12: <text>` for evidence."""
        return f"line {self.line_no}: {self.line}"


@dataclass
class LogScan:
    """What a log showed: first hit per signature, early metric values, first non-finite metric, garbled text, facts."""

    hits: dict[str, Hit] = field(default_factory=dict)
    metrics: dict[str, list[tuple[float, Hit]]] = field(default_factory=dict)
    nonfinite: Hit | None = None
    garbled: tuple[Hit, str] | None = None
    facts: dict[str, str] = field(default_factory=dict)
    raised: tuple[Raised, ...] = ()
    codes: list[tuple[errorcodes.Code, Hit]] = field(default_factory=list)
    stated: list[Stated] = field(default_factory=list)  # each package's first statement of each kind (stated.py)
    shown: list[Shown] = field(default_factory=list)  # classes the log's code constructs, with their keywords
    lines: int = 0
    size: int = 0

    def first(self, outcome: str) -> Hit | None:
        """The hit of the most decisive variant of an outcome's signatures that the log shows."""
        variant = self.first_variant(outcome)
        return None if variant is None else self.hits[f"{outcome}:{variant}"]

    def first_variant(self, outcome: str) -> str | None:
        """The variant name (after `outcome:`) of the hit `first` returns."""
        for name in SIGNATURES:
            if name.split(":")[0] == outcome and name in self.hits:
                return name.split(":", 1)[1]
        return None

    def values(self, key: str) -> list[float]:
        """The first values of a metric in the order they were logged."""
        return [v for v, _ in self.metrics.get(key, [])]

    @cached_property
    def judged(self) -> tuple[Judged, ...]:
        """Every exception read, named by the rules (rules.txt), in the order printed."""
        return tuple(judge(r) for r in self.raised)


def _is_key(buf: bytes, start: int) -> bool:
    """A metric name stands alone (`'grad_norm'`, after a colour code), not inside another (`val_grad_norm`); `a/grad_norm` is a namespace."""
    before = buf[start - 1 : start]
    return not before or not (before.isalnum() or before == b"_") or _ANSI_END.search(buf, max(0, start - 16), start) is not None


def _line_bounds(buf: bytes, start: int, end: int) -> tuple[int, int]:
    lo = max(buf.rfind(b"\n", 0, start), buf.rfind(b"\r", 0, start)) + 1
    his = [h for h in (buf.find(b"\n", end), buf.find(b"\r", end)) if h != -1]
    hi = min(his) if his else len(buf)
    return max(lo, start - MAX_LINE), min(hi, end + MAX_LINE)


def _line_at(buf: bytes, start: int, end: int) -> str:
    """The text of the line (or \\r-segment) around buf[start:end], cleaned and shortened."""
    lo, hi = _line_bounds(buf, start, end)
    text = _ANSI.sub(b"", buf[lo:hi]).decode("utf-8", "replace").strip()
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


def _before(buf: bytes, start: int) -> tuple[str, ...]:
    """Up to CONTEXT_LINES cleaned lines before `start` within this chunk (bounded: MAX_LINE bytes each)."""
    lo = max(0, start - CONTEXT_LINES * 256)
    lines = _ANSI.sub(b"", buf[lo : buf.rfind(b"\n", 0, start) + 1]).decode("utf-8", "replace").splitlines()
    return tuple(line[:EVIDENCE_CHARS] for line in lines[-CONTEXT_LINES:])


def _group(name: str) -> bytes:
    """An RE2 group name for a signature (a bytes pattern names its groups in bytes)."""
    return name.replace(":", "__").encode()


@dataclass(frozen=True)
class _Alternation:
    """A compiled alternation and where its parts are: (name, group index) in order, and the metric's groups."""

    pattern: Any
    parts: tuple[tuple[str, int], ...]
    index: dict[bytes, int]


@lru_cache(maxsize=32)
def _alternation(names: tuple[str, ...], metrics: bool) -> _Alternation | None:
    """One RE2 pattern for what is still wanted: unseen signatures and facts, the first non-finite value, metric values,
    generated-text candidates. (google-re2 rebuilds its group table on every name lookup: look up indices once.)"""
    # structure first: where a traceback starts, it is read before any signature on the same text (which is then searched
    # again with the structure left out, so nothing is missed)
    parts: list[tuple[str, bytes]] = [("struct", _STRUCT)] if "struct" in names else []
    if "code" in names:
        parts.append(("code", errorcodes.trigger().encode()))
    if "stated" in names:
        parts.append(("stated", stated_pattern().encode()))
    if "shown" in names:
        parts.append(("shown", _CALL_SHOWN))
    parts += [(n, p.encode()) for n, p in SIGNATURES.items() if n in names]
    parts += [("fact:" + n, p.replace("VALUE", "v__" + n).encode()) for n, p in FACTS.items() if "fact:" + n in names]
    if "nonfinite" in names:
        parts.append(("nonfinite", _NONFINITE))
    if "gen" in names:
        parts += [("gen:" + k, v) for k, v in _GEN.items()]
    if "table" in names:
        parts.append(("table", _TABLE))
    if not parts and not metrics:
        return None
    body = [b"(?P<%s>%s)" % (_group(n), p) for n, p in parts] + ([_METRIC] if metrics else [])
    pattern = re2.compile(b"|".join(body), _OPTIONS)
    index: dict[bytes, int] = dict(pattern.groupindex)
    order = tuple(n for n, _ in parts) + (("metric",) if metrics else ())
    return _Alternation(pattern, tuple((n, index[_group(n)]) for n in order), index)


def _id_list(buf: bytes, start: int) -> bytes:
    """An id list from `start`, followed over the wrapped lines that continue it (rank prefixes and \\r-redrawn
    progress bars removed), up to GEN_REGION bytes: the run of one id may go on over many printed lines."""
    lines = _STRIP.sub(b" ", _ANSI.sub(b"", buf[start : start + GEN_REGION])).split(b"\n")
    kept = [lines[0]]
    for line in lines[1:]:
        if not line.strip():
            continue  # a progress bar drawn between two lines of the list
        if not _LIST_LINE.match(line):
            break
        kept.append(line)
    return b"\n".join(kept)


def _line_start(buf: bytes, pos: int) -> int:
    return buf.rfind(b"\n", 0, pos) + 1


@lru_cache(maxsize=1)
def _STRUCT_ONLY() -> Any:  # a compiled constant, built on first use
    return re2.compile(_STRUCT, _OPTIONS)


def _spans(m: Any) -> Any:
    """Every group's (start, end), (-1, -1) where it did not take part. google-re2's Match keeps them in `_spans`;
    its public span(i) re-counts the pattern's groups on each call, 50 times slower over an alternation."""
    spans = getattr(m, "_spans", None)
    return spans if spans is not None else [m.span(i) for i in range(m.re.groups + 1)]


class _Scanner:
    def __init__(self) -> None:
        self.scan = LogScan()
        self.todo = {*SIGNATURES, *("fact:" + n for n in FACTS), "nonfinite", "gen", "table", "struct", "code", "stated", "shown"}
        self.metrics_left = METRIC_VALUES_KEPT
        self.gen_left = GEN_BUDGET
        self.nonfinite_left = METRIC_VALUES_KEPT
        self.reader = Reader()
        self.struct_left = STRUCT_BUDGET
        self.struct_until = -1  # where the head's structure reading stopped (absolute offset); -1 while it goes on
        self.code_left = CODE_HITS
        self.stated_left = STATED_HITS
        self.shown_left = CALLS_SHOWN
        self.harmless_left = HARMLESS_HITS

    def feed(self, buf: bytes, base_line: int, base: int = 0) -> None:
        """Search one chunk of whole lines (`base_line` lines and `base` bytes into the log) for everything still wanted."""
        counted = [0, base_line]  # (position, line number there): line numbers cost O(n) per chunk in all

        def line_no(start: int) -> int:
            pos, line = counted
            line += buf.count(b"\n", pos, start)
            counted[:] = [start, line]
            return line + 1

        def hit(start: int, end: int) -> Hit:
            return Hit(line_no(start), _line_at(buf, start, end))

        scan, pos = self.scan, 0
        done_to = {"gen": 0, "struct": 0, "code": 0, "shown": 0, "stated": 0}  # text already judged for generated text / read as structure / for codes
        while True:
            skip = {k for k, to in done_to.items() if pos < to and k in self.todo}
            alt = _alternation(tuple(sorted(self.todo - skip)), self.metrics_left > 0)
            if alt is None:
                return
            if skip:
                limit = min(done_to[k] for k in skip)
                m = alt.pattern.search(buf, pos, min(len(buf), limit + MAX_TAIL))
                if m is None or m.start() >= limit:
                    pos = limit
                    continue
            else:
                m = alt.pattern.search(buf, pos)
            if m is None:
                return
            pos = m.start() + 1  # not m.end(): a long match (an exception line) may hold another signature
            spans = _spans(m)
            name = next(n for n, i in alt.parts if spans[i][0] != -1)
            if name.startswith("gen:"):
                done_to["gen"] = self._generated(buf, m, name[len("gen:") :], hit)
            elif name == "struct":
                start = _line_start(buf, m.start())
                if buf.startswith(b"Traceback", m.start()):
                    self._announced(buf, start, line_no(start))
                else:
                    self._code_above(buf, start, line_no(start))
                _, read_to = self.region(buf, start, line_no(start))
                self.struct_left -= read_to - start
                done_to["struct"] = max(read_to, pos)  # what was read is not read again
                pos = m.start()  # the same text again for everything else
                if self.struct_left <= 0:
                    self.todo.discard("struct")
                    self.struct_until = base + read_to
            elif name == "code":
                found = hit(m.start(), m.end())
                lo, hi = _line_bounds(buf, m.start(), m.end())
                text = _ANSI.sub(b"", buf[lo:hi]).decode("utf-8", "replace")
                for code in errorcodes.find(text):
                    if code.family != "nccl" and "NCCL" in text and _nccl_failed_before(scan, found.line_no):
                        continue  # a CUDA call failing under NCCL after NCCL's own failure: its consequence, not the cause
                    if all(code != c for c, _ in scan.codes):
                        scan.codes.append((code, found))
                self.code_left -= 1
                if self.code_left <= 0:
                    self.todo.discard(name)
                done_to["code"] = hi
                pos = m.start()  # the rest of the line again for the signatures that start here
            elif name == "stated":
                self._stated(buf, alt, spans, hit(m.start(), m.end()))
                done_to["stated"] = m.start() + 1
                pos = m.start()  # the same place again for everything else (a signature may start where a statement does)
            elif name == "shown":
                self._shown(buf, m.start(), m.end(), line_no(m.start()))
                done_to["shown"] = m.end()
                pos = m.start()  # the same text again for everything else (`GGML_ASSERT(` is a call's shape and a signature)
            elif name == "metric":
                self.metrics_left -= 1  # a rejected one counts too: a log of `val_grad_norm` lines stays cheap
                key_at = spans[alt.index[b"mkey"]]
                if _is_key(buf, key_at[0]):
                    lo, hi = spans[alt.index[b"mval"]]
                    key = buf[key_at[0] : key_at[1]].decode().replace(" ", "_")
                    scan.metrics.setdefault(key, []).append((float(buf[lo:hi]), hit(m.start(), m.end())))
            elif name == "table":
                self._table(buf, m.start(), hit)
                self.todo.discard(name)  # one table per log: bounded work
            elif name == "nonfinite":
                self.nonfinite_left -= 1
                if b"scale" not in m.group(0).lower():  # `loss_scale: inf` is fp16 dynamic loss scaling, not a failure
                    scan.nonfinite = hit(m.start(), m.end())
                if scan.nonfinite is not None or self.nonfinite_left <= 0:
                    self.todo.discard(name)
            elif name.startswith("fact:"):
                fact = name[len("fact:") :]
                lo, hi = spans[alt.index[("v__" + fact).encode()]] if "VALUE" in FACTS[fact] else m.span()
                scan.facts[fact] = buf[lo:hi].decode("utf-8", "replace")
                self.todo.discard(name)
            else:
                found = hit(m.start(), m.end())
                if _harmless(name, buf, m.start(), m.end()):
                    self.harmless_left -= 1
                    if self.harmless_left <= 0:  # bounded work: past that many, these signatures are not read further
                        self.todo -= {n for n in self.todo if _harmless(n, buf, m.start(), m.end())}
                    continue
                if name.split(":")[0] in CONTEXT_OF:
                    found = Hit(found.line_no, found.line, _before(buf, m.start()))
                scan.hits[name] = found
                self.todo.discard(name)

    def _stated(self, buf: bytes, alt: _Alternation, spans: Any, found: Hit) -> None:
        """Keep a package's first statement of each kind (stated.py); bounded: STATED_HITS matches in all."""
        self.stated_left -= 1
        if self.stated_left <= 0:
            self.todo.discard("stated")
        group = next((g for g in HOW if spans[alt.index[g.encode()]][0] != -1), "")
        lo, hi = spans[alt.index[group.encode()]] if group else (-1, -1)
        dist = dist_of(buf[lo:hi].decode("utf-8", "replace")) if group else ""
        how = HOW.get(group, "")
        if dist and all((s.dist, s.how) != (dist, how) for s in self.scan.stated):
            self.scan.stated.append(Stated(dist, how, found.line_no, found.line))

    def _shown(self, buf: bytes, start: int, opened: int, line_no: int) -> None:
        """Keep a class the log's code constructs and the keywords its parentheses pass (followed over its lines, up to
        CALL_BYTES); bounded: CALLS_SHOWN calls in all."""
        self.shown_left -= 1
        if self.shown_left <= 0:
            self.todo.discard("shown")
        text = buf[opened - 1 : opened - 1 + CALL_BYTES].decode("utf-8", "replace")
        end = closing(text, 0)
        head = buf[start:opened].decode("utf-8", "replace")
        name = re.sub(r"^.*?([A-Z]\w*)\($", r"\1", head.strip())
        keywords = tuple(dict.fromkeys(re.findall(r"(?<![\w.])([A-Za-z_]\w*)\s*=(?!=)", text[1:end])))
        if keywords:
            self.scan.shown.append(Shown(name, keywords, line_no))

    def _announced(self, buf: bytes, start: int, line_no: int) -> None:
        """Hand the reader the ERROR record printed just before a traceback header (blank lines and progress bars between
        are looked through, up to three lines), if there is one."""
        end = start - 1
        for back in (1, 2, 3):
            if end <= 0:
                return
            lo = _line_start(buf, end)
            raw = _ANSI.sub(b"", buf[max(lo, end - MAX_LINE) : end]).decode("utf-8", "replace").rstrip("\r").rsplit("\r", 1)[-1]
            if raw.strip() and not _PROGRESS.search(raw):
                logical = clean(raw)
                at = raw.find(logical.text) if logical.text else -1
                prefix = raw[:at] if at >= 0 else raw  # what clean() removed: the logger's time, level and tags
                if logical.logged and _ERROR_LEVEL.search(prefix):
                    self.reader.announce(logical, line_no - back)
                return
            end = lo - 1

    def _code_above(self, buf: bytes, start: int, line_no: int) -> None:
        """Hand the reader the line just above an exception line printed without its frame: where it is a line of code
        (`self.model = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(**engine_args))`), it is the source line that
        raised, and it names what was called. One blank line may stand between them (a statement pasted over its error)."""
        end = start - 1
        for _ in range(2):
            if end <= 0:
                return
            lo = _line_start(buf, end)
            raw = _ANSI.sub(b"", buf[max(lo, end - MAX_LINE) : end]).decode("utf-8", "replace").rstrip("\r")
            if raw.strip():
                self.reader.code_above(clean(raw), line_no - 1)  # over a blank line, as the line right above it
                return
            end = lo - 1

    def region(self, buf: bytes, start: int, line_no: int) -> tuple[int, int]:
        """Read the lines from `start` as structure until REGION_GAP lines in a row are not part of a traceback (or
        REGION_BYTES); returns where the last structural line ends and where reading stopped."""
        pos, last, gap = start, start, 0
        while pos < len(buf) and gap < REGION_GAP and pos - start < REGION_BYTES:
            nl = buf.find(b"\n", pos)
            end = nl if nl != -1 else len(buf)
            raw = buf[pos : min(end, pos + MAX_LINE)].rstrip(b"\r").decode("utf-8", "replace")
            structural = False
            segments = raw.split("\r")
            for segment in [x for x in segments if x.strip()] if len(segments) > 1 else segments:  # a redrawn bar is not a blank line
                for part in unflatten(segment):
                    structural = self.reader.feed(clean(part), line_no) or structural
            gap = 0 if structural else gap + 1
            if structural:
                last = end
            pos, line_no = end + 1, line_no + 1
        return last, min(pos, len(buf))

    def finish(self, tail: bytes, tail_base: int, tail_line: int) -> None:
        """Read the log's tail as structure when the head's budget ran out before it (each byte once), then keep what was read."""
        if self.struct_until >= 0 and tail:
            skip = max(0, self.struct_until - tail_base)
            start = _line_start(tail, skip) if skip else 0
            if skip < len(tail):
                line_no = tail_line + tail.count(b"\n", 0, start) + 1
                for m in _STRUCT_ONLY().finditer(tail, start):
                    if m.start() < start:
                        continue
                    at = _line_start(tail, m.start())
                    line_no += tail.count(b"\n", start, at)
                    start = max(self.region(tail, at, line_no)[1], m.end())
                    line_no += tail.count(b"\n", at, start)
        self.scan.raised = self.reader.raised()

    def _table(self, buf: bytes, start: int, hit: Any) -> None:
        """Read a metrics table (header at `start`, then up to TABLE_ROWS numeric rows) into the metrics the
        rules judge, as if each row were a logged step; a non-finite loss or grad_norm cell is the non-finite hit."""
        lines = buf[start : start + TABLE_ROWS * 512].split(b"\n")
        names = [COLUMNS.get(c, c) for c in (_cell_name(c) for c in _cells(lines[0]))]
        offset = start + len(lines[0]) + 1
        for line in lines[1 : TABLE_ROWS + 1]:
            cells = _cells(line)
            if cells and all(set(c) <= set(b"-:= ") for c in cells):  # a markdown rule line
                offset += len(line) + 1
                continue
            values = [_number(c) for c in cells]
            if len(values) != len(names) or any(v is None for v in values):
                break
            for key, value in zip(names, values, strict=True):
                assert value is not None
                if key in ("grad_norm", "reward_std", "frac_reward_zero_std"):
                    self.scan.metrics.setdefault(key, []).append((value, hit(offset, offset + len(line))))
                if key in ("loss", "grad_norm") and not math.isfinite(value) and self.scan.nonfinite is None:
                    self.scan.nonfinite = hit(offset, offset + len(line))
            offset += len(line) + 1

    def _generated(self, buf: bytes, m: Any, kind: str, hit: Any) -> int:
        """Judge the text around a generated-text candidate; returns where the text judged ends."""
        self.gen_left -= 1
        lo, hi = _line_bounds(buf, m.start(), m.end())
        if kind == "labelled":
            text = _quoted(buf[m.end() : hi])
        elif kind == "ids":
            text = _id_list(buf, m.start())
        else:
            text = buf[lo:hi]
        verdict = garbled(_ANSI.sub(b"", text).decode("utf-8", "replace"))
        if verdict is not None:
            self.scan.garbled = (hit(m.start(), m.end()), verdict.reason)
        if verdict is not None or self.gen_left <= 0:
            self.todo.discard("gen")
        return m.end() if kind == "labelled" else hi  # a later label on the same line holds another text (`text=` in `outputs=[…]`)


def _quoted(text: bytes) -> bytes:
    """A labelled text that opens with a quote (`text=' is is is', token_ids=[…]`): the quoted part, not the fields after."""
    body = text.lstrip()
    if body[:1] in (b"'", b'"') and (end := body.find(body[:1], 1)) > 0:
        return body[1:end]
    return text


def _cells(line: bytes) -> list[bytes]:
    """A table row's cells: split on `|`, else tabs, else runs of two or more spaces."""
    text = _ANSI.sub(b"", line).strip().strip(b"|").strip()
    if b"|" in text:
        parts = text.split(b"|")
    elif b"\t" in text:
        parts = text.split(b"\t")
    else:
        parts = re.split(rb"  +", text)
    return [p.strip() for p in parts]


def _cell_name(cell: bytes) -> str:
    """`Training Loss` → `training_loss`, `rewards / x` → `rewards/x`."""
    return re.sub(r"\s*/\s*", "/", cell.decode("utf-8", "replace").strip().lower()).replace(" ", "_")


def _number(cell: bytes) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def scan_stream(stream: BinaryIO) -> LogScan:
    """Scan a binary stream chunk by chunk; memory stays near 2 * CHUNK + MAX_LINE + TAIL_BYTES whatever the size.

    A chunk ends at a line end (so a line is never split), unless one line outgrows every bound."""
    scanner = _Scanner()
    buf = b""
    line_no = 0
    offset = 0
    tail: list[tuple[int, int, bytes]] = []  # (offset, line number, bytes) of the last wholes, TAIL_BYTES at most
    while True:
        block = stream.read(CHUNK)
        scanner.scan.size += len(block)
        buf += block
        if block and len(buf) < CHUNK:
            continue
        if not block:
            cut = len(buf)
        else:
            cut = buf.rfind(b"\n") + 1
            if cut == 0:
                if len(buf) < CHUNK + MAX_LINE:
                    continue  # no line end yet: wait for more, within bounds
                cut = len(buf)  # one enormous line: search it as it is
        whole, buf = buf[:cut], buf[cut:]
        if whole:
            scanner.feed(whole, line_no, offset)
            tail.append((offset, line_no, whole))
            while sum(len(w) for _, _, w in tail) - len(tail[0][2]) >= TAIL_BYTES:
                tail.pop(0)
            offset += len(whole)
            line_no += whole.count(b"\n") + (0 if whole.endswith(b"\n") or block else 1)
        if not block:
            break
    scanner.scan.lines = line_no
    scanner.finish(b"".join(w for _, _, w in tail), tail[0][0] if tail else 0, tail[0][1] if tail else 0)
    return scanner.scan


def scan_text(text: str | bytes) -> LogScan:
    """Scan an in-memory log (tests, probe error messages)."""
    import io

    data = text.encode("utf-8", "replace") if isinstance(text, str) else text
    return scan_stream(io.BytesIO(data))
