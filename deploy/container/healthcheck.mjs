// The image's HEALTHCHECK: GET /readyz of the coordinator in this container (PORT, over https when
// TLS_CERT_FILE is set, not verifying the certificate: it is our own process on loopback). Exit 0
// on 200, 1 otherwise; one line saying why. Plain node, no dependencies.
/* global process, console */
import http from "node:http";
import https from "node:https";

const tls = Boolean(process.env.TLS_CERT_FILE);
const port = Number(process.env.PORT || 8080);
const client = tls ? https : http;
const req = client.get({ host: "127.0.0.1", port, path: "/readyz", timeout: 4000, rejectUnauthorized: false }, (res) => {
  let body = "";
  res.setEncoding("utf8");
  res.on("data", (d) => (body += d));
  res.on("end", () => {
    if (res.statusCode === 200) process.exit(0);
    console.log(`/readyz answered ${res.statusCode}: ${body.slice(0, 300)}`);
    process.exit(1);
  });
});
req.on("timeout", () => req.destroy(new Error("no answer within 4 s")));
req.on("error", (err) => {
  console.log(`/readyz: ${err.message}`);
  process.exit(1);
});
