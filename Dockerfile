# loadext: slim, non-root, no build tools in the final image.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY loadext ./loadext
RUN python -m venv /opt/loadext \
 && /opt/loadext/bin/pip install --no-cache-dir .

FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PATH=/opt/loadext/bin:$PATH
COPY --from=build /opt/loadext /opt/loadext
USER 65532:65532
EXPOSE 8888 9090
ENTRYPOINT ["loadext"]
CMD ["serve", "--config", "/etc/loadext/config.yaml"]
