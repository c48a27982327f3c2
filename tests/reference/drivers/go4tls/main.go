// The official Apache RocketMQ Go 4.x client (github.com/apache/rocketmq-client-go/v2) against
// a broker whose remoting port serves TLS (tls.server.mode). The released client (v2.1.2) has
// no TLS option, so it always speaks plaintext: a permissive port must serve it, an enforcing
// one must refuse it. Usage:
//
//	go4tlsdriver send <namesrv> <topic> <n>   n sync sends; then a push consumer reads them back
//
// Prints one line "RESULT send OK sent=<n> received=<m>" or "RESULT send FAIL <why>".
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

func fail(format string, args ...interface{}) {
	fmt.Printf("RESULT send FAIL %s\n", strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " "))
	os.Exit(1)
}

func main() {
	rlog.SetLogLevel("error")
	if len(os.Args) != 5 || os.Args[1] != "send" {
		fail("usage: go4tlsdriver send <namesrv> <topic> <n>")
	}
	ns, topic := os.Args[2], os.Args[3]
	n, err := strconv.Atoi(os.Args[4])
	if err != nil {
		fail("n: %v", err)
	}
	p, err := rocketmq.NewProducer(producer.WithNameServer([]string{ns}), producer.WithGroupName("go4tls-pg"),
		producer.WithInstanceName(fmt.Sprintf("go4tls-%d", os.Getpid())), producer.WithSendMsgTimeout(5*time.Second),
		producer.WithRetry(1))
	if err != nil {
		fail("new producer: %v", err)
	}
	if err := p.Start(); err != nil {
		fail("producer start: %v", err)
	}
	sent := 0
	for i := 0; i < n; i++ {
		r, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(fmt.Sprintf("go4tls-%d", i))))
		if err != nil {
			fail("send %d: %v", i, err)
		}
		if r.Status == primitive.SendOK {
			sent++
		}
	}
	_ = p.Shutdown()
	var got int64
	c, err := rocketmq.NewPushConsumer(consumer.WithNameServer([]string{ns}), consumer.WithGroupName("go4tls-cg"),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithInstance(fmt.Sprintf("go4tls-c-%d", os.Getpid())))
	if err != nil {
		fail("new consumer: %v", err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context,
		msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		atomic.AddInt64(&got, int64(len(msgs)))
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		fail("subscribe: %v", err)
	}
	if err := c.Start(); err != nil {
		fail("consumer start: %v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for atomic.LoadInt64(&got) < int64(n) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	_ = c.Shutdown()
	fmt.Printf("RESULT send OK sent=%d received=%d\n", sent, atomic.LoadInt64(&got))
}
