"""Import names that differ from the distribution that provides them, for remedies that say what to install.

Source: each distribution's PyPI page and top-level package (checked 2026-11-24). Names not listed install
under their import name with `_` written `-` (pip normalises the rest).
"""

from __future__ import annotations

DISTRIBUTIONS: dict[str, str] = {
    "yaml": "pyyaml",
    "cv2": "opencv-python",
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "google.protobuf": "protobuf",
    "attr": "attrs",
    "bs4": "beautifulsoup4",
    "dateutil": "python-dateutil",
    "jwt": "pyjwt",
    "skimage": "scikit-image",
    "Crypto": "pycryptodome",
    "serial": "pyserial",
    "OpenSSL": "pyopenssl",
    "git": "gitpython",
    "fitz": "pymupdf",
    "dotenv": "python-dotenv",
    "haiku": "dm-haiku",
    "whisper": "openai-whisper",
    "paddle": "paddlepaddle",
    "hydra": "hydra-core",
    "fastchat": "fschat",
    "nemo": "nemo-toolkit",
    "llama_cpp": "llama-cpp-python",
    "awq": "autoawq",
    "open_clip": "open-clip-torch",
    "auto_gptq": "auto-gptq",
    "InstructorEmbedding": "instructorembedding",
    # library names in transformers' `X requires the <library> library` messages
    "PyTorch": "torch",
    "TensorFlow": "tensorflow",
    "Flax": "flax",
    "Accelerate": "accelerate",
    # the standard library's distutils is gone (Python 3.12) or shadowed: setuptools installs its own under the name (its
    # `_distutils_hack`, from setuptools 60), so `module 'distutils' has no attribute 'version'` is setuptools' release
    "distutils": "setuptools",
    # code a package generates into the user's folder at run time: its own (unsloth writes patched trainers there)
    "unsloth_compiled_cache": "unsloth",
}


#: What users write for a distribution in version lists and prose that is neither its name nor an import name
#: (`llama factory 0.9.3`, `PyTorch version: 2.8.0`), keyed as nameindex.canonical folds it.
SPELLINGS: dict[str, str] = {
    "pytorch": "torch",
    "llama-factory": "llamafactory",
    "flash-attention": "flash-attn",
    "megatron-lm": "megatron-core",
}


def distribution(module: str) -> str:
    """The distribution to install for an import name (`yaml` → `pyyaml`, `flash_attn` → `flash-attn`)."""
    top = module.split(".")[0]
    return DISTRIBUTIONS.get(module) or DISTRIBUTIONS.get(top) or top.replace("_", "-").lower()


#: Import packages of the training stack that users run from source checkouts (`/workspace/verl/verl/trainer/…`), so a
#: traceback frame outside site-packages is still known to belong to them (and not to the user's own code).
STACK: frozenset[str] = frozenset(
    {
        "torch", "transformers", "trl", "peft", "accelerate", "deepspeed", "vllm", "sglang", "megatron", "verl", "openrlhf",
        "ray", "flash_attn", "xformers", "triton", "bitsandbytes", "datasets", "tokenizers", "safetensors", "huggingface_hub",
        "apex", "colossalai", "nemo", "lightning", "pytorch_lightning", "fairscale", "torchtune", "axolotl", "llamafactory",
        "swift", "unsloth", "liger_kernel", "flashinfer", "open_r1", "lmdeploy", "tensorrt_llm", "transformer_engine", "nemo_rl",
        "realhf", "areal", "slime", "roll", "easyr1", "unsloth_zoo", "xtuner", "mmengine", "diffusers", "timm", "jax", "tensorflow", "keras",
        "unsloth_compiled_cache",
    }
)  # fmt: skip


#: Import packages of widely installed libraries outside the training stack (numerics, audio, vision, text, tooling): a
#: message that names one (`module 'numpy' has no attribute 'float'`) names an installed distribution, not the user's
#: code. Not read for frames (a folder of that name outside site-packages stays the user's).
LIBRARIES: frozenset[str] = frozenset(
    {
        "numpy", "scipy", "pandas", "matplotlib", "torchvision", "torchaudio", "librosa", "gensim", "sympy", "nltk", "spacy",
        "einops", "sentence_transformers", "onnx", "onnxruntime", "soundfile", "h5py", "tqdm", "requests", "pydantic", "gradio",
        "openai", "tiktoken", "wandb", "tensorboard", "evaluate", "sentencepiece", "numba", "jsonschema", "packaging", "setuptools",
        "pyarrow", "fsspec", "torchmetrics", "torchtext", "transformers_stream_generator", "modelscope", "optimum",
        "auto_gptq", "awq", "gguf", "llama_cpp", "open_clip", "clip", "albumentations", "kornia", "networkx", "seaborn",
        # the rest of the ecosystem users' logs show (added 2026-11-28): quantization and kernels, JAX's, OpenMMLab's, RL
        # environments, the old names of transformers, interpretability, graph, serving and evaluation libraries
        "torchao", "hqq", "compressed_tensors", "llmcompressor", "mamba_ssm", "causal_conv1d", "sgl_kernel", "cupy", "pynvml",
        "jaxlib", "flax", "optax", "haiku", "mmcv", "mmdet", "mmseg", "detectron2", "gym", "gymnasium",
        "pytorch_pretrained_bert", "pytorch_transformers", "transformer_lens", "fairseq", "torch_geometric", "dgl",
        "outlines", "xgrammar", "lm_eval", "mlflow", "hydra", "omegaconf", "langchain", "llama_index", "whisper", "torch_xla",
        "keras_nlp", "tensorflow_hub", "tensorflow_addons", "paddle", "oneflow", "mindspore", "qwen_vl_utils", "decord",
        "jinja2", "markupsafe",
        # web and tooling libraries that training and serving code imports (and that release breaking changes: werkzeug's
        # `url_quote`, urllib3 2's removed names), and JAX's probabilistic and testing libraries
        "flask", "werkzeug", "fastapi", "starlette", "uvicorn", "aiohttp", "httpx", "urllib3", "grpc", "click", "typer",
        "rich", "psutil", "regex", "six", "wrapt", "chex", "numpyro", "Cython",
        "paddlenlp", "paddleocr", "paddlex", "paddleslim",  # Paddle's suite beside paddle itself
        # vision, NLP and inference runtimes whose releases rename their modules (`ultralytics.yolo`, allennlp's indexers,
        # TensorRT's builder methods, MLX's layers)
        "ultralytics", "allennlp", "tensorrt", "tensorrt_llm", "mlx", "mlx_lm", "timm", "diffusers", "peft", "dspy", "litellm",
        # evaluation, serialization and retrieval libraries under the training stack (dill's and multiprocess's pickling
        # internals that datasets reads, sacrebleu's tokenizers, OpenCompass, Haystack, the embedding and vector stores)
        "dill", "multiprocess", "sacrebleu", "rouge_score", "opencompass", "evalscope", "lighteval", "haystack", "FlagEmbedding",
        "faiss", "chromadb", "pymilvus", "colbert", "setfit", "thinc", "spacy_transformers", "lmcache", "llguidance",
        # torch's own satellites and the domain libraries built on torch (data pipes, RL, medical imaging, 3D, speech,
        # tabular and time series) and the gradient-boosting libraries beside them
        "torchdata", "tensordict", "torchrl", "stable_baselines3", "monai", "fastai", "pytorch3d", "open3d", "gsplat",
        "nerfstudio", "segmentation_models_pytorch", "speechbrain", "pyannote", "espnet", "gluonts", "xgboost", "lightgbm",
        "catboost", "statsmodels",
        # deployment runtimes, TensorFlow's satellites and the agent frameworks over served models
        "openvino", "coremltools", "executorch", "tensorflow_probability", "tf_keras", "langchain_core", "langchain_community",
        "langchain_openai", "autogen", "crewai", "smolagents", "qwen_agent",
    }
)  # fmt: skip


#: Top-level import names of known distributions: the training stack, a name that installs under another distribution,
#: a widely installed library.
KNOWN_IMPORTS: frozenset[str] = STACK | LIBRARIES | {n for n in DISTRIBUTIONS if "." not in n}


def known_import(name: str) -> bool:
    """Whether an import name is an installed distribution's package rather than possibly the user's own module."""
    return name.split(".")[0] in KNOWN_IMPORTS


def stack_package(name: str) -> bool:
    """Whether a folder name is an import package of the training stack (see STACK)."""
    return name in STACK
