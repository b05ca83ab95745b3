# The Kubernetes runner image: one environment's probe image (probe.Dockerfile) with envmatrix and the matrix file,
# so that a pod runs that environment's cells with the host backend, in the interpreter that holds the stack under
# test (no Docker engine, no privileges in the cluster); or, with `submit k8s --backend docker`, drives the node's engine
# through its socket, building probe images from the dockerfiles/ placed beside the installed package (backends/docker.py).
# Built by `envmatrix submit k8s --build` (submit/runner_image.py).
ARG PROBE_IMAGE
FROM ${PROBE_IMAGE}
ARG PROFILE

USER root
COPY src/ /opt/envmatrix/src/
COPY matrix.yaml /opt/envmatrix/matrix.yaml
# envmatrix joins the environment without changing it: every distribution the stack holds is a constraint at its
# installed version, so pip adds envmatrix's own dependencies or fails; it never upgrades torch, transformers, numpy.
RUN python -m pip list --format=freeze > /tmp/stack.txt \
 && python -m pip install --constraint /tmp/stack.txt /opt/envmatrix/src \
 && rm -rf /tmp/stack.txt /opt/envmatrix/src/build \
 && cp -r /opt/envmatrix/src/dockerfiles "$(python -c 'import envmatrix, pathlib; print(pathlib.Path(envmatrix.__file__).resolve().parents[1])')/dockerfiles" \
 && envmatrix --version \
 && envmatrix plan --file /opt/envmatrix/matrix.yaml --profile "$PROFILE" --format json > /dev/null
USER 1000
WORKDIR /home/probe
