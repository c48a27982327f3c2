// The official Apache RocketMQ Go client (github.com/apache/rocketmq-client-go/v2, a 4.x
// remoting client) against one broker, for request-reply. Usage:
//
//	go4driver request <namesrv> <topic> <n> <timeoutMs>   n requests, each waiting for its reply
//	go4driver timeout <namesrv> <topic> <timeoutMs>       one request nobody answers
//	go4driver reply <namesrv> <topic> <group>             answer requests until stdin closes
//
// Each prints one line "RESULT <scenario> OK k=v ..." or "RESULT <scenario> FAIL <why>".
package main

import (
	"context"
	"fmt"
	"io"
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

func fail(scenario string, format string, args ...interface{}) {
	why := strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " ")
	fmt.Printf("RESULT %s FAIL %s\n", scenario, why)
	os.Exit(1)
}

func newProducer(scenario, ns, group string) rocketmq.Producer {
	p, err := rocketmq.NewProducer(
		producer.WithNameServer([]string{ns}),
		producer.WithGroupName(group),
		producer.WithInstanceName(fmt.Sprintf("%s-%d", group, os.Getpid())),
		producer.WithSendMsgTimeout(10*time.Second),
		producer.WithRetry(2),
	)
	if err != nil {
		fail(scenario, "new producer: %v", err)
	}
	if err := p.Start(); err != nil {
		fail(scenario, "start producer: %v", err)
	}
	return p
}

func request(ns, topic string, n int, timeout time.Duration) {
	p := newProducer("request", ns, "go-requester")
	defer p.Shutdown()
	var replies []string
	replyTopic, sameCorrelation := "", true
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < n; i++ {
		for {
			msg := primitive.NewMessage(topic, []byte(fmt.Sprintf("g%d", i)))
			reply, err := p.Request(context.Background(), timeout, msg)
			if err != nil {
				// a replier still joining: its first rebalance may be on its way
				if time.Now().After(deadline) {
					fail("request", "no reply within 60 s: %v", err)
				}
				continue
			}
			replies = append(replies, string(reply.Body))
			replyTopic = reply.Topic
			sameCorrelation = sameCorrelation &&
				reply.GetProperty(primitive.PropertyCorrelationID) == msg.GetProperty(primitive.PropertyCorrelationID)
			break
		}
	}
	fmt.Printf("RESULT request OK replies=%s replyTopic=%s sameCorrelation=%t\n",
		strings.Join(replies, ","), replyTopic, sameCorrelation)
}

func timeoutScenario(ns, topic string, timeout time.Duration) {
	p := newProducer("timeout", ns, "go-lonely")
	defer p.Shutdown()
	if _, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte("warm"))); err != nil {
		fail("timeout", "warm-up send: %v", err)
	}
	t0 := time.Now()
	_, err := p.Request(context.Background(), timeout, primitive.NewMessage(topic, []byte("anyone?")))
	waited := time.Since(t0)
	if err == nil {
		fail("timeout", "a reply came from nobody")
	}
	fmt.Printf("RESULT timeout OK timedOut=true waitedOk=%t\n", waited >= timeout*9/10 && waited < timeout+5*time.Second)
}

func reply(ns, topic, group string) {
	p := newProducer("reply", ns, group+"-replies")
	defer p.Shutdown()
	var sent, failed int32
	c, err := rocketmq.NewPushConsumer(
		consumer.WithNameServer([]string{ns}),
		consumer.WithGroupName(group),
		consumer.WithInstance(fmt.Sprintf("%s-%d", group, os.Getpid())),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		fail("reply", "new consumer: %v", err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			cluster := m.GetProperty(primitive.PropertyCluster)
			if cluster == "" || m.GetProperty(primitive.PropertyCorrelationID) == "" {
				continue
			}
			// what the Java client's MessageUtil.createReplyMessage builds
			r := primitive.NewMessage(cluster+"_REPLY_TOPIC", append([]byte("re:"), m.Body...))
			r.WithProperty(primitive.PropertyMsgType, "reply")
			r.WithProperty(primitive.PropertyCorrelationID, m.GetProperty(primitive.PropertyCorrelationID))
			r.WithProperty(primitive.PropertyMessageReplyToClient, m.GetProperty(primitive.PropertyMessageReplyToClient))
			r.WithProperty(primitive.PropertyMessageTTL, m.GetProperty(primitive.PropertyMessageTTL))
			// a request the requester gave up on (it timed out and asked again) may be answered
			// after the requester left: the broker refuses that reply, which is counted
			if _, err := p.SendSync(context.Background(), r); err != nil {
				atomic.AddInt32(&failed, 1)
				fmt.Fprintf(os.Stderr, "reply failed: %v\n", err)
				continue
			}
			atomic.AddInt32(&sent, 1)
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		fail("reply", "subscribe: %v", err)
	}
	if err := c.Start(); err != nil {
		fail("reply", "start consumer: %v", err)
	}
	defer c.Shutdown()
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin) // the test closes stdin when its requests are done
	fmt.Printf("RESULT reply OK sent=%d failed=%d\n", atomic.LoadInt32(&sent), atomic.LoadInt32(&failed))
}

func atoi(scenario, s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		fail(scenario, "not a number: %q", s)
	}
	return v
}

func main() {
	rlog.SetLogLevel("error")
	if len(os.Args) < 2 {
		fail("usage", "go4driver request|timeout|reply ...")
	}
	a := os.Args[2:]
	switch os.Args[1] {
	case "request":
		request(a[0], a[1], atoi("request", a[2]), time.Duration(atoi("request", a[3]))*time.Millisecond)
	case "timeout":
		timeoutScenario(a[0], a[1], time.Duration(atoi("timeout", a[2]))*time.Millisecond)
	case "reply":
		reply(a[0], a[1], a[2])
	default:
		fail(os.Args[1], "unknown scenario")
	}
}
