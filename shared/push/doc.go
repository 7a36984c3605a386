// Package push is real-time push to drivers' and riders' phones: the API Gateway management API
// client (apigw.go), which posts a message to one phone's WebSocket connection, reads a
// connection's details and closes it. Phones hold their sockets on an AWS API Gateway WebSocket
// API in production and on flagdown dev's local gateway (cmd/flagdown/internal/wsgateway), which
// speaks the same management API; the same client code talks to both, only the endpoint differs.
package push
